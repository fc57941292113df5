"""`up`'s last step on the Traefik edge with staging first: wait for the staging resolver's answers, and
for the name sets staging issued, stop the edge, promote them (homelab/certs/staging.py), render the
routers onto the production resolver and apply again - production is asked in the same `up`, and only
for what staging issued. A set staging refused or has not answered stays on staging (said so)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from homelab.certs import attempts, guard, staging
from homelab.config.loaded import LoadedConfig
from homelab.engine import compose as apply
from homelab.engine.host import acme_json_path
from homelab.engine.model import select_stacks
from homelab.layout import EDGE_STACK, project_name
from homelab.plan_model import Plan
from homelab.project import render_project
from homelab.runtime.docker import Engine


def _label(names: frozenset[str]) -> str:
    return ", ".join(sorted(names, key=lambda n: (n.startswith("*."), n)))


def after_up(
    loaded: LoadedConfig,
    base: Plan,
    out: Path,
    docker: Engine,
    *,
    timeout: float,
    progress: Callable[[str], None] = lambda _msg: None,
) -> list[str]:
    """The lines `up` prints about staging; applies the switch when staging issued something."""
    plan: Plan = staging.with_stages(base)  # the stages as the edge holds them now
    acme = acme_json_path(plan)
    if plan.config.edge.kind != "traefik" or acme is None:
        return []
    outcome = staging.await_staging(plan, lambda: attempts.edge_log(plan, docker), timeout)
    lines = [
        f"certificates: staging refused {_label(n)}, production not asked: {error} (see `homelab certs check`)"
        for n, error in outcome.failed.items()
    ]
    lines += [
        f"certificates: staging has not answered for {_label(n)} yet; production is asked by the `homelab up` "
        "after it issued"
        for n in outcome.waiting
    ]
    if not outcome.ready:
        return lines
    # the production orders the switch lets Traefik make: refused (exit 5) past a budget, else recorded
    guard.enforce(dataclasses.replace(plan, production_ready=plan.production_ready | set(outcome.ready)), dry_run=False)
    progress(f"certificates: staging issued {'; '.join(_label(n) for n in outcome.ready)}: switching to production")
    edge_dir = out / EDGE_STACK
    docker.down(project_name(EDGE_STACK), edge_dir)  # Traefik must not hold the staging certificates
    promoted = staging.promote(plan, acme)
    result = render_project(loaded, out, plan=base)
    changed = [c.path for c in result.report.changes if c.status in ("new", "changed")]
    stacks = select_stacks(result.plan, [])
    convergence = apply.converge(
        result.plan, result.out, docker, stacks, changed_files=changed, include_removed_stacks=False
    )
    apply.apply(convergence, result.plan, docker, timeout=timeout, progress=progress)
    return lines + [
        f"certificates: {_label(n)}: staging issued it; the edge now orders it from production" for n in promoted
    ]
