"""up, down, logs when homelab.yaml says `engine: swarm` (homelab/cli/stack.py hands over here;
`status` reads its rows from homelab/engine/swarm_state.py).

Imported only by those commands, after the config is loaded: the library is imported at the top.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import typer

from homelab.cli.report import print_report
from homelab.config.loader import LoadedConfig
from homelab.engine import compose as apply
from homelab.engine import health
from homelab.engine import swarm as converge
from homelab.engine import swarm_state as state
from homelab.errors import EnvironmentProblem
from homelab.layout import project_name
from homelab.plan import Plan, build_plan
from homelab.project import default_out, render_project
from homelab.runtime import docker as engine
from homelab.runtime import process
from homelab.runtime.swarm import SwarmCli


def manager() -> SwarmCli:
    """The swarm driver, once the engine answers and is a swarm manager; else EnvironmentProblem."""
    engine.Docker().check()
    swarm = SwarmCli()
    found = swarm.state()
    if found.local != "active":
        raise EnvironmentProblem(
            f"engine: swarm, but this engine is not in a swarm ({found.local}): run `docker swarm init` (docs/swarm.md)"
        )
    if not found.manager:
        raise EnvironmentProblem("engine: swarm, but this node is a worker: run homelab on a manager node")
    return swarm


def engine_up(
    loaded: LoadedConfig,
    stacks: list[str] | None,
    out: Path | None,
    dry_run: bool,
    timeout: int,
    force: bool,
    progress: Callable[[str], None],
    show: Callable[[apply.Convergence], None],
) -> engine.Docker | None:
    """`up` on swarm (None: done). On compose: the checked engine, after taking homelab's swarm stacks
    down when the stacks folder holds stack files (the engine was swarm: the same services must not run
    twice)."""
    if loaded.config.engine == "swarm":
        up(loaded, stacks or [], out, dry_run=dry_run, timeout=timeout, force=force, progress=progress, show=show)
        return None
    docker = engine.Docker()
    docker.check()
    folder = (out or default_out(loaded)).resolve()
    if not dry_run and (folder / converge.SWARM_MARK).exists():
        converge.leave_swarm(SwarmCli(), folder, None, progress)
    return docker


def up(
    loaded: LoadedConfig,
    stacks: list[str],
    out: Path | None,
    *,
    dry_run: bool,
    timeout: int,
    force: bool,
    progress: Callable[[str], None],
    show: Callable[[apply.Convergence], None],
) -> None:
    from homelab.certs import guard

    began = time.monotonic()
    swarm = manager()
    guard.enforce(build_plan(loaded), dry_run=dry_run)  # refuses before anything is written
    result = render_project(loaded, out, force=force, dry_run=dry_run)
    selected = apply.select_stacks(result.plan, stacks)
    wanted = converge.desired(result.plan, result.out, result.rendering.files, selected)
    convergence = converge.converge(result.plan, wanted, swarm, include_removed_stacks=not stacks)
    if result.report.changed:
        print_report(result, applied=not dry_run)
    show(convergence)
    if dry_run:
        return
    done = "nothing to apply"
    if convergence.changed:
        state.label_single_node(swarm, progress)
        outcome = converge.apply(
            convergence, wanted, result.plan, swarm, engine.Docker(), timeout=timeout, progress=progress
        )
        done = ", ".join(outcome.applied + [f"{s} (removed)" for s in outcome.removed]) + " applied"
    # whatever this run deployed: every declared service of the selected stacks must run at the end
    gate = health.gated_stacks(result.plan, selected)
    health.require_declared(partial(state.swarm_down, result.plan, swarm, gate), timeout)
    typer.echo(f"up: {done}; all converged and healthy in {time.monotonic() - began:.1f}s")


def down(plan: Plan, out: Path, stacks: list[str], progress: Callable[[str], None]) -> None:
    selected = apply.select_stacks(plan, stacks)
    done = converge.leave_swarm(manager(), out, selected, progress)
    typer.echo(f"down: {', '.join(done)} removed from the swarm; data kept" if done else "down: nothing was running")


def logs(stack: str, service: str, *, follow: bool, tail: str) -> None:
    swarm = manager()
    name = f"{project_name(stack)}_{service}"
    if name not in {s.name for s in swarm.services([project_name(stack)])}:
        raise EnvironmentProblem(f"{stack}/{service} is not deployed on the swarm: run `homelab up` first")
    raise typer.Exit(process.stream(swarm.logs_argv(name, follow=follow, tail=tail)))
