"""Renderers: Plan -> {relative path: bytes}. Pure functions, no I/O.

`render_all` collects every target's files into one Rendering: public files (written under the
stacks folder, committed as golden files for the example) and secret files (written 0600 into
the secrets folder, never printed).
"""

from __future__ import annotations

from homelab.layout import COMPOSE_FILE, DDCLIENT_CONF_SECRET
from homelab.plan_model import Plan
from homelab.render.rendering import Rendering as Rendering


def render_all(plan: Plan, secret_values: dict[str, str]) -> Rendering:
    """Every file for every stack. `secret_values` holds the user-provided secrets that must be
    embedded in secret config files (ddclient.conf, collectd's IPMI block)."""
    from homelab.render import compose, ddclient, edge_nginx, edge_traefik, local_ca, monitoring, sso
    from homelab.render import swarm_stack as swarm

    rendering = Rendering()
    swarm_engine = plan.config.engine == "swarm"
    for stack in plan.stacks.values():
        if not swarm_engine:
            rendering.add(f"{stack.name}/{COMPOSE_FILE}", compose.render_stack(plan, stack))
    if plan.config.edge.kind == "traefik":
        edge_traefik.render(plan, rendering)
    else:
        edge_nginx.render(plan, rendering)
    local_ca.render(plan, rendering)  # only in local mode (`up --local`)
    if DDCLIENT_CONF_SECRET in plan.secrets:
        ddclient.render(plan, rendering, secret_values)
    if plan.config.monitoring.enabled:
        monitoring.render(plan, rendering, secret_values)
    if plan.config.sso.enabled:
        sso.render(plan, rendering, secret_values)
    if swarm_engine:  # last: the stack files name each config by its content
        swarm.render(plan, rendering)
    return rendering
