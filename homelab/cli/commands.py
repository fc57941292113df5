"""init, validate, render, plan, doctor."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from homelab.cli import ConfigOption, app
from homelab.cli.errors import handled
from homelab.cli.report import print_checks, print_report

CONFIG_DEFAULT = Path("homelab.yaml")
OutOption = Annotated[
    Path | None, typer.Option("--out", "-o", help="Stacks folder (default: ./stacks next to the config).")
]
ForceOption = Annotated[bool, typer.Option("--force", help="Replace files homelab did not write or that were edited.")]


@app.command()
def init(
    config: ConfigOption = CONFIG_DEFAULT,
    profile: Annotated[str, typer.Option(help="Hardware profile to start from.")] = "ecc-mini-itx",
) -> None:
    """Write a commented homelab.yaml for a hardware profile. Never overwrites."""
    from homelab.init import write_starter

    with handled():
        write_starter(config, profile)
    typer.echo(f"wrote {config}; edit it, create the secret files it names (chmod 600), then: homelab validate")


@app.command()
def validate(config: ConfigOption = CONFIG_DEFAULT) -> None:
    """Check homelab.yaml and the secret files it names. Exit 2 with file:line: key: problem."""
    from homelab.config.loader import load
    from homelab.plan import build_plan

    with handled():
        build_plan(load(config))
    typer.echo(f"{config}: ok")


@app.command()
def render(config: ConfigOption = CONFIG_DEFAULT, out: OutOption = None, force: ForceOption = False) -> None:
    """Write the stacks and the secrets folder; only changed files are written."""
    from homelab.config.loader import load
    from homelab.project import render_project

    with handled():
        result = render_project(load(config), out, force=force)
    print_report(result, applied=True)


@app.command()
def plan(config: ConfigOption = CONFIG_DEFAULT, out: OutOption = None, force: ForceOption = False) -> None:
    """Show what render would change: files new/changed/identical and the stacks affected."""
    from homelab.config.loader import load
    from homelab.project import render_project

    with handled():
        result = render_project(load(config), out, force=force, dry_run=True)
    print_report(result, applied=False)


@app.command()
def doctor(config: ConfigOption = CONFIG_DEFAULT) -> None:
    """Preflight: docker + compose, ports, DNS names, ZFS, acme.json, free disk."""
    from homelab.config.loader import load
    from homelab.doctor import run_checks
    from homelab.plan import build_plan

    with handled():
        checks = run_checks(build_plan(load(config)))
    raise typer.Exit(print_checks(checks))
