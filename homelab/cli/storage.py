"""homelab storage plan|apply: ZFS datasets for every enabled app role. Never destroys."""

from __future__ import annotations

import typer

from homelab.cli.errors import HandledGroup
from homelab.cli.options import DEFAULT_CONFIG, ConfigOption

storage_app = typer.Typer(
    cls=HandledGroup, help="ZFS datasets for the apps: plan, then apply (never destroys).", no_args_is_help=True
)


@storage_app.command("plan")
def plan_cmd(config: ConfigOption = DEFAULT_CONFIG) -> None:
    """Show the datasets and properties apply would create or change, and each fallback."""
    from homelab.config.loader import load
    from homelab.plan import build_plan
    from homelab.storage import plan_storage

    result = plan_storage(build_plan(load(config)))
    for step in result.steps:
        typer.echo(f"  {step}")
    typer.echo(
        f"{len(result.changes)} changes, {len(result.warnings)} warnings (pool {result.support.pool} "
        f"version {result.support.version})"
    )


@storage_app.command("apply")
def apply_cmd(config: ConfigOption = DEFAULT_CONFIG) -> None:
    """Create missing datasets, adjust properties, chown mountpoints; report each step."""
    from homelab.config.loader import load
    from homelab.plan import build_plan
    from homelab.storage import apply_storage

    result = apply_storage(build_plan(load(config)), report=lambda step: typer.echo(f"  {step}"))
    typer.echo(f"done: {len(result.changes)} changes, {len(result.warnings)} warnings")
