"""up, down, status, logs: the stacks on the engine homelab.yaml names (homelab/engine/): the commands parse
their flags and print; the library does the rest (homelab/up.py, the engine's verbs)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from functools import partial
from typing import TYPE_CHECKING, Annotated

import typer

from homelab.cli.app import app
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
    from homelab.engine.interface import Engine
    from homelab.engine.model import Convergence
    from homelab.project import RenderResult
    from homelab.up import Loaded

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
    """Render, show the plan, apply what changed (edge first), wait until every declared service is healthy;
    roll back a failed upgrade."""
    from homelab import up as session

    loaded = session.load(config, out, local)
    options = session.UpOptions(list(stacks or []), dry_run, timeout, force, not no_snapshot, local)
    shown = session.Shown(plan=partial(_print_plan, applied=not dry_run), progress=_progress(ctx), say=typer.echo)
    session.up(loaded, _engine(loaded), options, shown)


def _engine(loaded: Loaded) -> Engine:
    from homelab.engine.interface import engine_for

    return engine_for(loaded.config.config)


def _print_plan(result: RenderResult, convergence: Convergence, *, applied: bool) -> None:
    from homelab.cli.report import print_report

    if result.report.changed:
        print_report(result, applied=applied)
    _print_convergence(convergence)


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
    from homelab import up as session
    from homelab.engine.model import select_stacks

    loaded = session.load(config, out, local)
    selected = select_stacks(loaded.plan, stacks or [])
    engine = _engine(loaded)
    engine.check()
    done = engine.down(loaded.plan, loaded.out, selected, _progress(ctx))
    typer.echo(f"down: {', '.join(done)} stopped; data kept" if done else "down: nothing was running")


@app.command()
def status(config: ConfigOption = DEFAULT_CONFIG, out: OutOption = None, as_json: JsonOption = False) -> None:
    """Per service: state, health, image, route URL, certificate expiry, last change, memory in use / limit,
    restarts (and whether the last exit was an OOM kill), and why a service is not running and healthy in
    the engine's words; then drift (containers changed by hand, strays; `up` repairs them); and a rollback
    left unfinished (the journal says so, whatever the containers do)."""
    from homelab import up as session
    from homelab.engine.drift import describe
    from homelab.upgrade.journal import unsettled

    loaded = session.load(config, out, local=False)
    engine = _engine(loaded)
    engine.check()
    rows = engine.status(loaded.plan)
    drifts = engine.status_drift(loaded.plan, loaded.out)
    bad = [r for r in rows if r.reason]
    unfinished = unsettled(loaded.out)
    if as_json:
        ok = not bad and not unfinished
        emit_json(
            {
                "ok": ok,
                "services": [asdict(r) for r in rows],
                "drift": [asdict(d) for d in drifts],
                "unfinished": unfinished,
            }
        )
        raise typer.Exit(0 if ok else 1)
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
        typer.echo(describe(found))
    for line in unfinished:
        typer.echo(line)
    raise typer.Exit(1 if bad or unfinished else 0)


@app.command()
def logs(
    service: Annotated[str, typer.Argument(help="Service name, e.g. traefik, nextcloud, db.")],
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new lines.")] = False,
    tail: Annotated[str, typer.Option("--tail", help="Lines from the end ('all' for everything).")] = "200",
    config: ConfigOption = DEFAULT_CONFIG,
    out: OutOption = None,
) -> None:
    """Print a service's logs (from the stack it belongs to, on the engine that runs it)."""
    from homelab import up as session
    from homelab.errors import ConfigError
    from homelab.runtime import process

    loaded = session.load(config, out, local=False)
    stack = next((s for s in loaded.plan.stacks.values() if service in s.services), None)
    if stack is None:
        known = ", ".join(n for s in loaded.plan.stacks.values() for n in s.services)
        raise ConfigError([f"unknown service {service!r} (services: {known})"])
    engine = _engine(loaded)
    engine.check()
    argv = engine.logs_argv(stack.name, service, loaded.out, follow=follow, tail=tail)
    raise typer.Exit(process.stream(argv))
