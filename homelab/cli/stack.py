"""up, down, status, logs: the stacks on the Docker Engine."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict
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
    from homelab.apply import Convergence


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
) -> None:
    """Render, show the plan, apply only what changed (edge first), wait for health; roll back a failed
    upgrade (docs/upgrades.md)."""
    from homelab import apply, drift
    from homelab.certs import guard
    from homelab.cli.report import print_report
    from homelab.cli.swarm import engine_up
    from homelab.config.loader import load
    from homelab.plan import build_plan
    from homelab.project import default_out, render_project
    from homelab.upgrade import guard_for, read_composes

    began = time.monotonic()
    loaded = load(config)
    if (docker := engine_up(loaded, stacks, out, dry_run, timeout, force, _progress(ctx), _print_convergence)) is None:
        return
    guard.enforce(build_plan(loaded), dry_run=dry_run)  # refuses before anything is written
    previous = read_composes((out or default_out(loaded)).resolve())
    result = render_project(loaded, out, force=force, dry_run=dry_run)
    selected = apply.select_stacks(result.plan, stacks or [])
    changed = [c.path for c in result.report.changes if c.status in ("new", "changed")]
    pending = None
    if dry_run:
        pending = {s: result.rendering.files[f"{s}/compose.yaml"] for s in selected if f"{s}/compose.yaml" in changed}
    convergence = apply.converge(
        result.plan,
        result.out,
        docker,
        selected,
        changed_files=changed,
        pending_compose=pending,
        include_removed_stacks=not stacks,
    )
    repairs = drift.mark_repairs(convergence, drift.find_drift(convergence, result.plan, changed))
    if result.report.changed:
        print_report(result, applied=not dry_run)
    _print_convergence(convergence)
    if dry_run or not convergence.changed:
        return
    progress = _progress(ctx)
    undo = guard_for(convergence, result.plan, result.out, docker, previous, not no_snapshot, timeout, progress)
    outcome = apply.apply(convergence, result.plan, docker, timeout=timeout, progress=progress, guard=undo)
    for found in repairs:
        typer.echo(f"repaired {drift.describe(found)}")
    done = ", ".join(outcome.applied + [f"{s} (removed)" for s in outcome.removed])
    typer.echo(f"up: {done} applied; all healthy in {time.monotonic() - began:.1f}s")


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
    ctx: typer.Context, stacks: StacksArgument = None, config: ConfigOption = DEFAULT_CONFIG, out: OutOption = None
) -> None:
    """Stop and remove the stacks' containers (reverse order). Datasets, acme.json and secrets are kept."""
    from homelab import apply
    from homelab.config.loader import load
    from homelab.plan import build_plan
    from homelab.project import default_out
    from homelab.runtime.docker import Docker

    loaded = load(config)
    plan = build_plan(loaded)
    if loaded.config.engine == "swarm":
        from homelab.cli import swarm

        swarm.down(plan, (out or default_out(loaded)).resolve(), stacks or [], _progress(ctx))
        return
    selected = apply.select_stacks(plan, stacks or [])
    docker = Docker()
    docker.check()
    done = apply.down(plan, (out or default_out(loaded)).resolve(), docker, selected, progress=_progress(ctx))
    typer.echo(f"down: {', '.join(done)} stopped; data kept" if done else "down: nothing was running")


@app.command()
def status(config: ConfigOption = DEFAULT_CONFIG, out: OutOption = None, as_json: JsonOption = False) -> None:
    """Per service: state, health, image, route URL, certificate expiry, last change; then drift
    (containers changed by hand, strays; `up` repairs them)."""
    from homelab import drift
    from homelab import status as service_status
    from homelab.config.loader import load
    from homelab.plan import build_plan
    from homelab.project import default_out
    from homelab.runtime.docker import Docker

    loaded = load(config)
    plan = build_plan(loaded)
    if loaded.config.engine == "swarm":  # no drift: Swarm itself puts back what differs from the spec
        from homelab.cli.swarm import manager
        from homelab.swarm.state import status as swarm_status

        rows, drifts = swarm_status(plan, manager()), []
    else:
        docker = Docker()
        docker.check()
        rows = service_status.status(plan, docker)
        drifts = drift.status_drift(plan, (out or default_out(loaded)).resolve(), docker)
    bad = [r for r in rows if r.state != "running" or r.health == "unhealthy"]
    if as_json:
        emit_json({"ok": not bad, "services": [asdict(r) for r in rows], "drift": [asdict(d) for d in drifts]})
        raise typer.Exit(1 if bad else 0)
    header = ("SERVICE", "STATE", "HEALTH", "IMAGE", "URL", "CERT EXPIRES", "LAST CHANGE")
    print_table(
        header,
        [(f"{r.stack}/{r.service}", r.state, r.health, r.image, r.url, r.cert_expiry, r.last_change) for r in rows],
    )
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
