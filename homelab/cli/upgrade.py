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
        safety = f"  (discarded writes: @{r.safety})" if r.safety else ""
        typer.echo(f"{r.stack:12} {r.stamp}  {r.state:11} {snapshot}  {moved}{safety}")
    if list_ and not records:
        typer.echo("no upgrades yet")


@app.command()
def rollback(
    stack: Annotated[str, typer.Argument(help="The stack whose last upgrade to undo (e.g. cloud, dev).")],
    timeout: Annotated[int, typer.Option("--timeout", min=1, help="Seconds to wait for health.")] = 300,
    discard_writes: Annotated[
        bool,
        typer.Option(
            "--discard-writes",
            help="Roll the data back even though the new version wrote to it (kept in a safety snapshot); "
            "without it homelab asks on a terminal and refuses elsewhere.",
        ),
    ] = False,
    keep_data: Annotated[
        bool,
        typer.Option(
            "--keep-data", help="Previous images on the data as it is now, where the app can (docs/upgrades.md)."
        ),
    ] = False,
    config: ConfigOption = DEFAULT_CONFIG,
    out: OutOption = None,
) -> None:
    """Undo a stack's last upgrade (or finish an interrupted rollback): previous images and compose file,
    datasets back to the snapshot; what was written since is kept in a safety snapshot."""
    import sys

    from homelab.config.loader import load
    from homelab.plan import build_plan
    from homelab.project import default_out
    from homelab.runtime.docker import Docker
    from homelab.runtime.zfs import ZfsCli
    from homelab.upgrade import undo as upgrade_undo
    from homelab.upgrade.run import backup_state

    def decide(loss: str) -> bool:
        if discard_writes:
            return True
        if not sys.stdin.isatty():
            return False
        typer.echo(f"rolling back {stack} discards what was written since its upgrade:\n{loss}")
        return typer.confirm("roll back anyway (a safety snapshot keeps it)?", default=False)

    loaded = load(config)
    stacks = (out or default_out(loaded)).resolve()
    docker = Docker()
    docker.check()
    marks = backup_state(build_plan(loaded))
    record = upgrade_undo.rollback(
        stacks, docker, ZfsCli(), stack, timeout=timeout, progress=typer.echo, decide=decide, keep_data=keep_data,
        marks=marks,
    )  # fmt: skip
    typer.echo(f"rollback: {stack} is back on the version before {record.stamp}")
    if record.safety:
        typer.echo(f"rollback: what it discarded is kept in the safety snapshot @{record.safety}")
