"""homelab upgrade --list, homelab rollback STACK: the upgrades `up` made and undoing the last one."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Annotated

import typer

from homelab.cli.app import app
from homelab.cli.options import DEFAULT_CONFIG, ConfigOption, JsonOption, OutOption


@app.command()
def upgrade(
    list_: Annotated[bool, typer.Option("--list", help="List the upgrades `up` made and their snapshots.")] = False,
    as_json: JsonOption = False,
    config: ConfigOption = DEFAULT_CONFIG,
    out: OutOption = None,
) -> None:
    """Upgrades happen in `homelab up` when an image changes (snapshot first, rolled back if unhealthy);
    this lists them: stack, when, images, snapshot, outcome."""
    from homelab.config.loader import load
    from homelab.project import default_out
    from homelab.upgrade.journal import list_records

    records = list_records((out or default_out(load(config))).resolve())
    if as_json:
        typer.echo(json.dumps([asdict(r) for r in records], indent=1))
        return
    if not list_:
        typer.echo("upgrades run in `homelab up`; `homelab upgrade --list` shows them")
    for r in records:
        moved = ", ".join(f"{c.service} {c.old} -> {c.new}" for c in r.changes)
        snapshot = f"@{r.snapshot}" if r.snapshot else "(no snapshot)"
        typer.echo(f"{r.stack:12} {r.stamp}  {r.state:11} {snapshot}  {moved}")
    if list_ and not records:
        typer.echo("no upgrades yet")


@app.command()
def rollback(
    stack: Annotated[str, typer.Argument(help="The stack whose last upgrade to undo (e.g. cloud, dev).")],
    timeout: Annotated[int, typer.Option("--timeout", min=1, help="Seconds to wait for health.")] = 300,
    config: ConfigOption = DEFAULT_CONFIG,
    out: OutOption = None,
) -> None:
    """Undo a stack's last upgrade: previous images and compose file, datasets back to the snapshot."""
    from homelab.config.loader import load
    from homelab.project import default_out
    from homelab.runtime.docker import Docker
    from homelab.runtime.zfs import ZfsCli
    from homelab.upgrade import undo as upgrade_undo

    stacks = (out or default_out(load(config))).resolve()
    docker = Docker()
    docker.check()
    record = upgrade_undo.rollback(stacks, docker, ZfsCli(), stack, timeout=timeout, progress=typer.echo)
    typer.echo(f"rollback: {stack} is back on the version before {record.stamp}")
