"""up, down, status, logs: the stacks on the Docker Engine."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from homelab.cli import ConfigOption, app
from homelab.cli.errors import handled

CONFIG_DEFAULT = Path("homelab.yaml")
OutOption = Annotated[
    Path | None, typer.Option("--out", "-o", help="Stacks folder (default: ./stacks next to the config).")
]
StacksArgument = Annotated[
    list[str] | None,
    typer.Argument(help="Stacks to act on (edge, media, cloud, dev, monitoring); default: all."),
]
VERBS = {"create": "create", "recreate": "recreate", "start": "start", "remove": "remove"}


def _echo(message: str) -> None:
    typer.echo(message)


@app.command()
def up(
    stacks: StacksArgument = None,
    config: ConfigOption = CONFIG_DEFAULT,
    out: OutOption = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show what would change; change nothing.")] = False,
    timeout: Annotated[
        int, typer.Option("--timeout", min=1, help="Seconds each stack may take to become healthy.")
    ] = 300,
    force: Annotated[bool, typer.Option("--force", help="Replace stack files edited by hand.")] = False,
) -> None:
    """Render, show the plan, apply only what changed (edge first), wait for health."""
    from homelab import apply
    from homelab.cli.report import print_report
    from homelab.config.loader import load
    from homelab.project import render_project
    from homelab.runtime.docker import Docker

    began = time.monotonic()
    with handled():
        loaded = load(config)
        docker = Docker()
        docker.check()
        result = render_project(loaded, out, force=force, dry_run=dry_run)
        selected = apply.select_stacks(result.plan, stacks or [])
        changed = [c.path for c in result.report.changes if c.status in ("new", "changed")]
        pending = None
        if dry_run:
            pending = {
                s: result.rendering.files[f"{s}/compose.yaml"] for s in selected if f"{s}/compose.yaml" in changed
            }
        convergence = apply.converge(
            result.plan,
            result.out,
            docker,
            selected,
            changed_files=changed,
            pending_compose=pending,
            include_removed_stacks=not stacks,
        )
        if result.report.changed:
            print_report(result, applied=not dry_run)
        _print_convergence(convergence)
        if dry_run or not convergence.changed:
            return
        outcome = apply.apply(convergence, result.plan, docker, timeout=timeout, progress=_echo)
    done = ", ".join(outcome.applied + [f"{s} (removed)" for s in outcome.removed])
    typer.echo(f"up: {done} applied; all healthy in {time.monotonic() - began:.1f}s")


def _print_convergence(convergence) -> None:  # type: ignore[no-untyped-def]
    left = convergence.actions("leave")
    for action in convergence.actions():
        if action.action != "leave":
            reason = f"  ({action.reason})" if action.reason else ""
            typer.echo(f"  {VERBS[action.action]:9} {action.stack}/{action.service}{reason}")
    if not convergence.changed:
        typer.echo(f"no changes: {len(left)} services up to date")
        return
    counts = {kind: len(convergence.actions(kind)) for kind in ("create", "recreate", "start", "remove")}
    summary = ", ".join(f"{n} to {kind}" for kind, n in counts.items() if n)
    typer.echo(f"{summary}, {len(left)} unchanged")


@app.command()
def down(stacks: StacksArgument = None, config: ConfigOption = CONFIG_DEFAULT, out: OutOption = None) -> None:
    """Stop and remove the stacks' containers (reverse order). Datasets, acme.json and secrets are kept."""
    from homelab import apply
    from homelab.config.loader import load
    from homelab.plan import build_plan
    from homelab.project import default_out
    from homelab.runtime.docker import Docker

    with handled():
        loaded = load(config)
        plan = build_plan(loaded)
        selected = apply.select_stacks(plan, stacks or [])
        docker = Docker()
        docker.check()
        done = apply.down(plan, (out or default_out(loaded)).resolve(), docker, selected, progress=_echo)
    typer.echo(f"down: {', '.join(done)} stopped; data kept" if done else "down: nothing was running")


@app.command()
def status(config: ConfigOption = CONFIG_DEFAULT) -> None:
    """Per service: state, health, image, route URL, certificate expiry, last change."""
    from homelab import apply
    from homelab.config.loader import load
    from homelab.plan import build_plan
    from homelab.runtime.docker import Docker

    with handled():
        plan = build_plan(load(config))
        docker = Docker()
        docker.check()
        rows = apply.status(plan, docker)
    header = ("SERVICE", "STATE", "HEALTH", "IMAGE", "URL", "CERT EXPIRES", "LAST CHANGE")
    table = [header] + [
        (f"{r.stack}/{r.service}", r.state, r.health, r.image, r.url, r.cert_expiry, r.last_change) for r in rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        typer.echo("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    bad = [r for r in rows if r.state != "running" or r.health == "unhealthy"]
    raise typer.Exit(1 if bad else 0)


@app.command()
def logs(
    service: Annotated[str, typer.Argument(help="Service name, e.g. traefik, nextcloud, db.")],
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new lines.")] = False,
    tail: Annotated[str, typer.Option("--tail", help="Lines from the end ('all' for everything).")] = "200",
    config: ConfigOption = CONFIG_DEFAULT,
    out: OutOption = None,
) -> None:
    """Print a service's logs (compose's, from the stack it belongs to)."""
    from homelab.config.loader import load
    from homelab.errors import ConfigError
    from homelab.plan import build_plan
    from homelab.project import default_out
    from homelab.runtime import process
    from homelab.runtime.docker import Docker

    with handled():
        loaded = load(config)
        plan = build_plan(loaded)
        stack = next((s for s in plan.stacks.values() if service in s.services), None)
        if stack is None:
            known = ", ".join(n for s in plan.stacks.values() for n in s.services)
            raise ConfigError([f"unknown service {service!r} (services: {known})"])
        docker = Docker()
        docker.check()
        directory = (out or default_out(loaded)).resolve() / stack.name
        code = process.stream(docker.logs_argv(f"homelab-{stack.name}", directory, service, follow=follow, tail=tail))
    raise typer.Exit(code)
