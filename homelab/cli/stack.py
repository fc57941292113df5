"""up, down, status, logs: the stacks on the Docker Engine."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict
from functools import partial
from typing import TYPE_CHECKING, Annotated

import typer

from homelab.cli import app
from homelab.cli.options import (
    DEFAULT_CONFIG,
    ConfigOption,
    DryRunOption,
    JsonOption,
    OutOption,
    StacksArgument,
    quiet,
)
from homelab.cli.report import emit_json, print_table

if TYPE_CHECKING:  # keep `homelab --help` fast: no pydantic at import time
    from pathlib import Path

    from homelab.config.loader import LoadedConfig
    from homelab.engine.compose import ApplyResult, Convergence
    from homelab.engine.drift import Drift
    from homelab.plan import Plan
    from homelab.project import RenderResult
    from homelab.runtime.docker import Docker

LocalOption = Annotated[
    bool,
    typer.Option(
        "--local",
        help="Local mode: the apps on <app>.localhost with certificates from a local ACME CA (Pebble) it runs; "
        "nothing reaches Let's Encrypt. Files under local/ next to homelab.yaml.",
    ),
]


def _progress(ctx: typer.Context) -> Callable[[str], None]:
    """Each step as it happens; nothing with -q (the summary line and errors still print)."""
    return (lambda _: None) if quiet(ctx) else typer.echo


@app.command()
def up(
    ctx: typer.Context,
    stacks: StacksArgument = None,
    config: ConfigOption = DEFAULT_CONFIG,
    out: OutOption = None,
    dry_run: DryRunOption = False,
    timeout: Annotated[
        int, typer.Option("--timeout", min=1, help="Seconds each stack may take to become healthy.")
    ] = 300,
    force: Annotated[bool, typer.Option("--force", help="Replace stack files edited by hand.")] = False,
    no_snapshot: Annotated[
        bool, typer.Option("--no-snapshot", help="Upgrade images even where no snapshot can undo it.")
    ] = False,
    local: LocalOption = False,
) -> None:
    """Render, show the plan, apply what changed (edge first), wait for health; roll back a failed upgrade."""
    from homelab.certs import guard
    from homelab.cli.report import print_report
    from homelab.engine import compose as apply
    from homelab.engine import drift, health
    from homelab.plan import build_plan
    from homelab.project import default_out, render_project
    from homelab.upgrade import guard_for, journal_first

    began = time.monotonic()
    loaded, plan, out = _load(config, out, local)
    docker = _engine_for_up(loaded, stacks, out, dry_run, timeout, force, ctx)
    guard.enforce(plan or build_plan(loaded), dry_run=dry_run)  # refuses before anything is written
    stacks_dir = (out or default_out(loaded)).resolve()
    previous = journal_first(stacks_dir, docker, timeout=timeout, progress=_progress(ctx), dry_run=dry_run)
    result = render_project(loaded, out, force=force, dry_run=dry_run, plan=plan)
    selected = apply.select_stacks(result.plan, stacks or [])
    if local and not dry_run:
        _pull_local(result.plan, selected, docker, result.out)
    changed = [c.path for c in result.report.changes if c.status in ("new", "changed")]
    pending = None
    if dry_run:
        pending = {s: result.rendering.files[f"{s}/compose.yaml"] for s in selected if f"{s}/compose.yaml" in changed}
    convergence = apply.converge(
        result.plan, result.out, docker, selected, changed_files=changed, pending_compose=pending,
        include_removed_stacks=not stacks,
    )  # fmt: skip
    repairs = drift.mark_repairs(convergence, drift.find_drift(convergence, result.plan, changed))
    if result.report.changed:
        print_report(result, applied=not dry_run)
    _print_convergence(convergence)
    if dry_run:
        return
    progress, done = _progress(ctx), "nothing to apply"
    if convergence.changed:
        undo = guard_for(convergence, result.plan, result.out, docker, previous, not no_snapshot, timeout, progress)
        outcome = apply.apply(convergence, result.plan, docker, timeout=timeout, progress=progress, guard=undo)
        done = _applied(outcome, repairs)
    # whatever this run deployed: every declared service of the selected stacks must be up at the end
    gate = health.gated_stacks(result.plan, selected)
    health.require_declared(partial(health.compose_down, result.plan, docker, gate), timeout)
    typer.echo(f"up: {done}; all healthy in {time.monotonic() - began:.1f}s")
    _finish(stacks, loaded, result, docker, timeout, progress, local)


def _applied(outcome: ApplyResult, repairs: list[Drift]) -> str:
    from homelab.engine.drift import describe

    for found in repairs:
        typer.echo(f"repaired {describe(found)}")
    return ", ".join(outcome.applied + [f"{s} (removed)" for s in outcome.removed]) + " applied"


def _load(config: Path, out: Path | None, local: bool) -> tuple[LoadedConfig, Plan | None, Path | None]:
    """The config as `up`/`down` act on it: as written, or localized with its own plan and folder."""
    from homelab import local as local_mode
    from homelab.config.loader import load

    loaded = load(config)
    if not local:
        return loaded, None, out
    localized = local_mode.localize(loaded)
    return localized, local_mode.local_plan(localized), out or local_mode.local_out(loaded)


def _engine() -> Docker:
    """The Docker Engine, checked: reachable, with compose v2 (else exit 4, one line)."""
    from homelab.runtime.docker import Docker

    docker = Docker()
    docker.check()
    return docker


def _engine_for_up(
    loaded: LoadedConfig,
    stacks: list[str] | None,
    out: Path | None,
    dry_run: bool,
    timeout: int,
    force: bool,
    ctx: typer.Context,
) -> Docker:
    """The checked engine for compose; with engine: swarm, `up` runs on Swarm here (homelab/cli/swarm.py)
    and the command ends."""
    from homelab.cli.swarm import engine_up

    docker = engine_up(loaded, stacks, out, dry_run, timeout, force, _progress(ctx), _print_convergence)
    if docker is None:
        raise typer.Exit(0)
    return docker


def _pull_local(plan: Plan, stacks: list[str], docker: Docker, out: Path) -> None:
    from homelab import local as local_mode

    local_mode.pull_missing(plan, stacks, docker, out)  # refuses naming each image it cannot pull


def _finish(
    stacks: list[str] | None,
    loaded: LoadedConfig,
    result: RenderResult,
    docker: Docker,
    timeout: int,
    progress: Callable[[str], None],
    local: bool,
) -> None:
    """After `up` applied (or found nothing to do): staging first's switch - production is asked, in
    this `up`, for what staging issued; only on an `up` of every stack, as it changes every app's
    routers - then local mode's last step."""
    if not stacks:
        from homelab.certs import switch

        for line in switch.after_up(loaded, result.out, docker, timeout=timeout, progress=progress):
            typer.echo(line)
    if local:
        from homelab import local as local_mode

        local_mode.finish(loaded, result.plan, typer.echo)


def _print_convergence(convergence: Convergence) -> None:
    left = convergence.actions("leave")
    for action in convergence.actions():
        if action.action != "leave":
            reason = f"  ({action.reason})" if action.reason else ""
            typer.echo(f"  {action.action:9} {action.stack}/{action.service}{reason}")
    if not convergence.changed:
        typer.echo(f"no changes: {len(left)} services up to date")
        return
    counts = {kind: len(convergence.actions(kind)) for kind in ("create", "recreate", "start", "remove")}
    summary = ", ".join(f"{n} to {kind}" for kind, n in counts.items() if n)
    typer.echo(f"{summary}, {len(left)} unchanged")


@app.command()
def down(
    ctx: typer.Context,
    stacks: StacksArgument = None,
    config: ConfigOption = DEFAULT_CONFIG,
    out: OutOption = None,
    local: LocalOption = False,
) -> None:
    """Stop and remove the stacks' containers (reverse order). Datasets, acme.json and secrets are kept."""
    from homelab.engine import compose as apply
    from homelab.plan import build_plan
    from homelab.project import default_out

    loaded, local_plan, out = _load(config, out, local)
    plan = local_plan or build_plan(loaded)
    if loaded.config.engine == "swarm":
        from homelab.cli import swarm

        swarm.down(plan, (out or default_out(loaded)).resolve(), stacks or [], _progress(ctx))
        return
    selected = apply.select_stacks(plan, stacks or [])
    docker = _engine()
    done = apply.down(plan, (out or default_out(loaded)).resolve(), docker, selected, progress=_progress(ctx))
    typer.echo(f"down: {', '.join(done)} stopped; data kept" if done else "down: nothing was running")


@app.command()
def status(config: ConfigOption = DEFAULT_CONFIG, out: OutOption = None, as_json: JsonOption = False) -> None:
    """Per service: state, health, image, route URL, certificate expiry, last change, memory in use / limit,
    restarts (and whether the last exit was an OOM kill); then drift
    (containers changed by hand, strays; `up` repairs them)."""
    from homelab.config.loader import load
    from homelab.engine import drift
    from homelab.engine import status as service_status
    from homelab.plan import build_plan
    from homelab.project import default_out
    from homelab.runtime.docker import Docker

    loaded = load(config)
    plan = build_plan(loaded)
    if loaded.config.engine == "swarm":  # no drift: Swarm itself puts back what differs from the spec
        from homelab.cli.swarm import manager
        from homelab.engine.swarm_state import status as swarm_status

        rows, drifts = swarm_status(plan, manager()), []
    else:
        docker = Docker()
        docker.check()
        rows = service_status.status(plan, docker)
        drifts = drift.status_drift(plan, (out or default_out(loaded)).resolve(), docker)
    bad = [r for r in rows if r.reason]
    if as_json:
        emit_json({"ok": not bad, "services": [asdict(r) for r in rows], "drift": [asdict(d) for d in drifts]})
        raise typer.Exit(1 if bad else 0)
    header = ("SERVICE", "STATE", "HEALTH", "IMAGE", "URL", "CERT EXPIRES", "LAST CHANGE", "MEMORY", "RESTARTS")
    cells = [
        (
            f"{r.stack}/{r.service}",
            r.state,
            r.health,
            r.image,
            r.url,
            r.cert_expiry,
            r.last_change,
            r.memory,
            f"{r.restarts}{' (OOM-killed)' if r.oom_killed else ''}",
        )
        for r in rows
    ]
    print_table(header, cells)
    for r in bad:
        typer.echo(f"down: {r.stack}/{r.service}: {r.reason}")
    for found in drifts:
        typer.echo(drift.describe(found))
    raise typer.Exit(1 if bad else 0)


@app.command()
def logs(
    service: Annotated[str, typer.Argument(help="Service name, e.g. traefik, nextcloud, db.")],
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new lines.")] = False,
    tail: Annotated[str, typer.Option("--tail", help="Lines from the end ('all' for everything).")] = "200",
    config: ConfigOption = DEFAULT_CONFIG,
    out: OutOption = None,
) -> None:
    """Print a service's logs (compose's, from the stack it belongs to)."""
    from homelab.config.loader import load
    from homelab.errors import ConfigError
    from homelab.plan import build_plan
    from homelab.project import default_out
    from homelab.runtime import process
    from homelab.runtime.docker import Docker

    loaded = load(config)
    plan = build_plan(loaded)
    stack = next((s for s in plan.stacks.values() if service in s.services), None)
    if stack is None:
        known = ", ".join(n for s in plan.stacks.values() for n in s.services)
        raise ConfigError([f"unknown service {service!r} (services: {known})"])
    if loaded.config.engine == "swarm":
        from homelab.cli import swarm

        swarm.logs(stack.name, service, follow=follow, tail=tail)
    docker = Docker()
    docker.check()
    directory = (out or default_out(loaded)).resolve() / stack.name
    code = process.stream(docker.logs_argv(f"homelab-{stack.name}", directory, service, follow=follow, tail=tail))
    raise typer.Exit(code)
