"""Renderers: Plan -> {relative path: bytes}. Pure functions, no I/O.

`render_all` collects every target's files into one Rendering: public files (written under the
stacks folder, committed as golden files for the example) and secret files (written 0600 into
the secrets folder, never printed).
"""

from __future__ import annotations

from collections.abc import Callable

from homelab.layout import COMPOSE_FILE, DDCLIENT_CONF_SECRET
from homelab.plan_model import Plan
from homelab.render.rendering import Rendering as Rendering

# adds each stack's file for the engine that runs the stacks: compose.yaml, or Swarm's stack.yaml
# (homelab/engine/interface.py `stack_files_for` chooses, from the config's engine)
StackFiles = Callable[[Plan, Rendering], None]


def compose_files(plan: Plan, rendering: Rendering) -> None:
    """Each stack's compose.yaml (engine: compose)."""
    from homelab.render import compose

    for stack in plan.stacks.values():
        rendering.add(f"{stack.name}/{COMPOSE_FILE}", compose.render_stack(plan, stack))


def render_all(plan: Plan, secret_values: dict[str, str], stack_files: StackFiles = compose_files) -> Rendering:
    """Every file for every stack. `secret_values` holds the user-provided secrets that must be
    embedded in secret config files (ddclient.conf, collectd's IPMI block, the SSO portal's users); `stack_files`
    adds the stack files last (Swarm's name each config by its content)."""
    from homelab.render import ddclient, edge_nginx, edge_traefik, local_ca, monitoring, sso

    rendering = Rendering()
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
    stack_files(plan, rendering)
    return rendering
