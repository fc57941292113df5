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
    """Show the datasets and properties apply would create or change, and each fallback; then the ZFS ARC
    cap (zfs_arc_max) the memory budget leaves on this machine."""
    from homelab.config.loader import load
    from homelab.memory import host_budget, plan_arc
    from homelab.plan import build_plan
    from homelab.storage import plan_storage

    plan = build_plan(load(config))
    result = plan_storage(plan)
    for step in result.steps:
        typer.echo(f"  {step}")
    typer.echo(f"  {plan_arc(host_budget(plan).arc_max).describe()}")
    typer.echo(
        f"{len(result.changes)} changes, {len(result.warnings)} warnings (pool {result.support.pool} "
        f"version {result.support.version})"
    )


@storage_app.command("apply")
def apply_cmd(config: ConfigOption = DEFAULT_CONFIG) -> None:
    """Create missing datasets, adjust properties, chown mountpoints, cap the ZFS ARC; report each step."""
    from homelab.config.loader import load
    from homelab.memory import apply_arc, host_budget, plan_arc
    from homelab.plan import build_plan
    from homelab.storage import apply_storage

    plan = build_plan(load(config))
    result = apply_storage(plan, report=lambda step: typer.echo(f"  {step}"))
    for line in apply_arc(plan_arc(host_budget(plan).arc_max)):
        typer.echo(f"  {line}")
    typer.echo(f"done: {len(result.changes)} changes, {len(result.warnings)} warnings")
