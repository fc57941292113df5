"""init, validate, render, plan, doctor."""

from __future__ import annotations

from typing import Annotated

import typer

from homelab.cli.app import app
from homelab.cli.options import DEFAULT_CONFIG, ConfigOption, ForceOption, JsonOption, NewConfigOption, OutOption
from homelab.cli.report import emit_json, print_checks, print_report, report_json


@app.command()
def init(
    config: NewConfigOption = DEFAULT_CONFIG,
    profile: Annotated[str, typer.Option(help="Hardware profile to start from.")] = "ecc-mini-itx",
) -> None:
    """Write a commented homelab.yaml for a hardware profile. Never overwrites."""
    from homelab.init import write_starter

    write_starter(config, profile)
    typer.echo(f"wrote {config}; edit it, create the secret files it names (chmod 600), then: homelab validate")


@app.command()
def validate(config: ConfigOption = DEFAULT_CONFIG, as_json: JsonOption = False) -> None:
    """Check homelab.yaml and the secret files it names. Exit 2 with file:line: key: problem."""
    from homelab.config.loader import load
    from homelab.plan import build_plan

    plan = build_plan(load(config))
    if as_json:
        stacks = {name: sorted(stack.services) for name, stack in plan.stacks.items()}
        emit_json({"ok": True, "config": str(config), "stacks": stacks})
        return
    typer.echo(f"{config}: ok")


@app.command()
def render(config: ConfigOption = DEFAULT_CONFIG, out: OutOption = None, force: ForceOption = False) -> None:
    """Write the stacks and the secrets folder; only changed files are written."""
    from homelab.config.loader import load
    from homelab.project import render_project

    print_report(render_project(load(config), out, force=force), applied=True)


@app.command()
def plan(
    config: ConfigOption = DEFAULT_CONFIG,
    out: OutOption = None,
    force: ForceOption = False,
    as_json: JsonOption = False,
) -> None:
    """Show the memory budget (reservations, limits, ZFS ARC cap against this machine's RAM when it is
    server.hostname, else the profile's), then what render would change: files new/changed/identical and
    the stacks affected. Exit 1 when the reservations do not fit this machine's RAM."""
    from homelab.config.loader import load
    from homelab.memory import planning_budget
    from homelab.project import render_project

    result = render_project(load(config), out, force=force, dry_run=True)
    box = planning_budget(result.plan)
    failed = box.problems()  # only on this machine: past the profile's RAM the config is refused (exit 2)
    if as_json:
        emit_json({**report_json(result, config), "ok": not failed, "budget": box.as_json()})
        raise typer.Exit(1 if failed else 0)
    typer.echo("memory budget (docs/resources.md):")
    for line in [*box.summary(), *(f"fail: {p}" for p in failed), *(f"warn: {w}" for w in box.warnings())]:
        typer.echo(f"  {line}")
    print_report(result, applied=False)
    raise typer.Exit(1 if failed else 0)


@app.command()
def doctor(config: ConfigOption = DEFAULT_CONFIG, as_json: JsonOption = False) -> None:
    """Preflight: docker + compose, ports, DNS names, ZFS, acme.json, free disk, the memory budget against
    this machine's RAM and the ZFS ARC cap."""
    from homelab.config.loader import load
    from homelab.doctor import run_checks
    from homelab.memory import host_budget
    from homelab.monitoring.discover import bmc_reader
    from homelab.plan import build_plan

    loaded = load(config)
    plan = build_plan(loaded)
    checks = run_checks(plan, bmc=bmc_reader(loaded) if loaded.config.monitoring.inventory else None)
    if not as_json:
        raise typer.Exit(print_checks(checks))
    failed = sum(c.level == "fail" for c in checks)
    rows = [{"level": c.level, "name": c.name, "detail": c.detail} for c in checks]
    emit_json({"ok": not failed, "failed": failed, "checks": rows, "budget": host_budget(plan).as_json()})
    raise typer.Exit(1 if failed else 0)
