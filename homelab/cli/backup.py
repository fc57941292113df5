"""homelab backup run|verify|restore|drill|schedule|status|prune|snapshot."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from homelab.cli.errors import HandledGroup
from homelab.cli.options import DEFAULT_CONFIG, ConfigOption, JsonOption

if TYPE_CHECKING:
    from homelab.backup import Context
    from homelab.runtime.docker import Docker

backup_app = typer.Typer(
    cls=HandledGroup, help="Encrypted backups of the app datasets (ZFS snapshot -> rclone crypt).", no_args_is_help=True
)
schedule_app = typer.Typer(
    cls=HandledGroup, help="systemd timer + service units for scheduled backups and drills.", no_args_is_help=True
)
backup_app.add_typer(schedule_app, name="schedule")

DatasetOption = Annotated[list[str] | None, typer.Option("--dataset", "-d", help="Only this <app>/<role> (repeat).")]
RemoteOption = Annotated[str | None, typer.Option("--remote", help="Only this remote (default: all).")]
StateOption = Annotated[
    Path | None,
    typer.Option("--state-dir", envvar="HOMELAB_BACKUP_STATE", help="Records folder (default: backup.state_dir)."),
]


def _ctx(
    config: Path, state_dir: Path | None, remote: str | None = None, *, read_only: bool = False, engine: bool = False
) -> Context:
    from homelab.backup import context
    from homelab.config.loader import load

    ctx = context(
        load(config), state_dir=state_dir, remote=remote, read_only=read_only, engine=_engine() if engine else None
    )
    for note in ctx.notes:
        typer.echo(f"note: {note}", err=True)
    return ctx


def _engine() -> Docker | None:
    """The engine the recovery bundle's dumps and image IDs come from; without one the bundle has neither."""
    from homelab.errors import HomelabError
    from homelab.runtime.docker import Docker

    docker = Docker()
    try:
        docker.check()
    except HomelabError as exc:
        typer.echo(f"note: no database dumps in the recovery bundle: {exc}", err=True)
        return None
    return docker


def _say(text: str) -> None:
    typer.echo(text)


@backup_app.command("run")
def run_cmd(
    config: ConfigOption = DEFAULT_CONFIG,
    dataset: DatasetOption = None,
    remote: RemoteOption = None,
    state_dir: StateOption = None,
    deep: Annotated[
        bool, typer.Option("--deep", help="cryptcheck every object, not only those written; upload again what differs.")
    ] = False,
) -> None:
    """Snapshot -> encrypted sync -> cryptcheck -> JSON record. Non-zero exit naming the cause on failure."""
    from homelab.backup import Progress, run_backup

    report = run_backup(_ctx(config, state_dir, remote, engine=True), dataset, progress=Progress, say=_say, deep=deep)
    r = report.record
    typer.echo(f"backup {r.id}: success, {r.files} files, {r.bytes} bytes, {r.duration} s")


@backup_app.command("verify")
def verify_cmd(
    config: ConfigOption = DEFAULT_CONFIG,
    dataset: DatasetOption = None,
    remote: RemoteOption = None,
    state_dir: StateOption = None,
) -> None:
    """cryptcheck the remote against the snapshot of the last successful backup; names each bad file."""
    from homelab.backup import verify

    record = verify(_ctx(config, state_dir, remote), dataset, say=_say)
    typer.echo(f"verified: {record.checked} files match")


@backup_app.command("restore")
def restore_cmd(
    dataset: Annotated[str, typer.Argument(help="<app>/<role> (or the dataset name).")],
    to: Annotated[Path, typer.Option("--to", help="A new or empty folder.")],
    at: Annotated[datetime | None, typer.Option("--at", help="As of this date/time (UTC), e.g. 2025-01-31.")] = None,
    path: Annotated[str | None, typer.Option("--path", help="Only this file or folder of the dataset.")] = None,
    config: ConfigOption = DEFAULT_CONFIG,
    remote: RemoteOption = None,
    state_dir: StateOption = None,
) -> None:
    """Restore a dataset (or --path of it) into --to, from the latest backup or as of --at."""
    from homelab.backup import restore

    when = at.replace(tzinfo=UTC) if at and at.tzinfo is None else at
    result = restore(_ctx(config, state_dir, remote), dataset, to, at=when, subpath=path)
    owners = "restored" if result.owners_restored else "not restored (run as root to restore owners)"
    typer.echo(f"restored {result.files} files of {result.dataset} ({result.as_of}) into {to}")
    typer.echo(f"modes and mtimes of {result.metadata} entries applied; owners {owners}")
    if result.missing:  # a run that died midway: only what reached the remote
        shown = ", ".join(repr(p) for p in result.missing[:5]) + (" ..." if len(result.missing) > 5 else "")
        typer.echo(
            f"partial: run {result.as_of} did not finish; {len(result.missing)} paths never reached the remote: {shown}"
        )


@backup_app.command("drill")
def drill_cmd(
    config: ConfigOption = DEFAULT_CONFIG,
    sample: int = 20,
    full: Annotated[
        bool | None, typer.Option("--full/--sample-only", help="Default: full when the last is 30+ days old.")
    ] = None,
    state_dir: StateOption = None,
    whole: Annotated[
        bool,
        typer.Option(
            "--recover", help="The whole recovery (`homelab recover`, no stack started) into scratch, compared."
        ),
    ] = False,
) -> None:
    """Restore a random sample (monthly: everything) into scratch and compare with the snapshot."""
    from homelab.backup import drill

    if whole:
        from homelab.backup.recovery_drill import recovery_drill

        done = recovery_drill(_ctx(config, state_dir), say=_say)
        typer.echo(
            f"recovery drill ok: bundle {done.bundle}, {done.datasets} datasets identical to their snapshots, "
            f"{done.sentinels} sentinels read back; RTO {done.rto_seconds}s, RPO {done.rpo_seconds}s"
        )
        return
    record = drill(_ctx(config, state_dir), sample=sample, full=full, say=_say)
    typer.echo(f"drill ok: {record.files} files restored and identical ({'full' if record.full else 'sample'})")


@backup_app.command("status")
def status_cmd(
    config: ConfigOption = DEFAULT_CONFIG,
    as_json: JsonOption = False,
    state_dir: StateOption = None,
) -> None:
    """Last run (interrupted when its process died), last success and its age, last verify and drill.

    Exit 1 when no run has succeeded last, or the last verify or drill failed."""
    from homelab.backup import status

    info = status(_ctx(config, state_dir, read_only=True))  # a status command writes nothing
    if as_json:
        typer.echo(info.model_dump_json(indent=2))
    else:
        from homelab.backup.report import status_lines

        for line in status_lines(info):
            typer.echo(line)
    if not info.healthy:
        raise typer.Exit(1)


@backup_app.command("prune")
def prune_cmd(config: ConfigOption = DEFAULT_CONFIG, dry_run: bool = False, state_dir: StateOption = None) -> None:
    """Destroy snapshots past the retention policy (never one a running or last good backup needs)."""
    from homelab.backup import prune

    ctx = _ctx(config, state_dir)
    for d in ctx.datasets:
        for name in prune(ctx, d, dry_run=dry_run):
            typer.echo(f"{'would prune' if dry_run else 'pruned'} {d.name}@{name}")


@backup_app.command("snapshot")
def snapshot_cmd(config: ConfigOption = DEFAULT_CONFIG, state_dir: StateOption = None) -> None:
    """Take a snapshot of each backed-up dataset now (no upload), then prune."""
    from homelab.backup import take_snapshots

    for name in take_snapshots(_ctx(config, state_dir)):
        typer.echo(f"snapshot {name}")


@schedule_app.command("print")
def schedule_print(config: ConfigOption = DEFAULT_CONFIG) -> None:
    """Print the units install would write."""
    from homelab.backup.schedule import units
    from homelab.config.loader import load

    for name, text in units(load(config)).items():
        typer.echo(f"# --- {name}\n{text}")


@schedule_app.command("install")
def schedule_install(
    config: ConfigOption = DEFAULT_CONFIG,
    unit_dir: Annotated[Path, typer.Option(help="Where to write the units.")] = Path("/etc/systemd/system"),
    enable: Annotated[bool, typer.Option("--enable/--no-enable", help="systemctl enable --now the timers.")] = True,
) -> None:
    """Write the units and enable the timers."""
    from homelab.backup.schedule import install
    from homelab.config.loader import load

    for path in install(load(config), unit_dir, enable=enable):
        typer.echo(f"wrote {path}")
