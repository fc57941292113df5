"""homelab recover: the whole server from the offsite backup onto a bare machine."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer

from homelab.cli.app import app


def _secret(file: Path | None, prompt: str) -> str:
    if file is not None:
        return file.read_text(encoding="utf-8").rstrip("\r\n")
    return str(typer.prompt(prompt, hide_input=True))


RemoteOption = Annotated[
    str,
    typer.Option(
        "--remote",
        help="Where the backups are, as rclone names it: a folder, or TYPE:PATH with the backend's options "
        "(`:sftp,host=backup.example,user=nas:homelab`; credentials from rclone's RCLONE_SFTP_PASS-style "
        "environment variables). The remote's own path, not its `-crypt`.",
    ),
]
ConfigDirOption = Annotated[
    Path, typer.Option("--config-dir", help="The config folder to write (homelab.yaml and what it names).")
]
PasswordFileOption = Annotated[
    Path | None, typer.Option("--password-file", help="File with the crypt password (default: asked).")
]
SaltFileOption = Annotated[Path | None, typer.Option("--salt-file", help="File with the crypt salt (default: asked).")]
AtOption = Annotated[datetime | None, typer.Option("--at", help="The newest bundle at or before this date/time (UTC).")]
PoolOption = Annotated[str | None, typer.Option("--pool", help="Another ZFS pool name.")]
MountpointOption = Annotated[str | None, typer.Option("--mountpoint", help="Another storage.mountpoint.")]
DomainOption = Annotated[str | None, typer.Option("--domain", help="Another domain: new certificates, staging first.")]
FoldersOption = Annotated[bool, typer.Option("--folders", help="Plain folders instead of ZFS datasets.")]
ReplaceOption = Annotated[
    bool, typer.Option("--replace", help="Recover over an existing config and datasets that hold data.")
]
NoStartOption = Annotated[bool, typer.Option("--no-start", help="Restore only; bring no stack up.")]
StallOption = Annotated[
    int, typer.Option("--stall-timeout", min=5, help="Seconds a transfer may make no progress (remote lost).")
]


@app.command()
def recover(
    remote: RemoteOption,
    config_dir: ConfigDirOption = Path(),
    password_file: PasswordFileOption = None,
    salt_file: SaltFileOption = None,
    at: AtOption = None,
    pool: PoolOption = None,
    mountpoint: MountpointOption = None,
    domain: DomainOption = None,
    folders: FoldersOption = False,
    replace: ReplaceOption = False,
    no_start: NoStartOption = False,
    stall_timeout: StallOption = 300,
) -> None:
    """Find the newest complete recovery bundle, write the config, create and restore every dataset, bring the
    stacks up healthy and read each app's sentinel back; prints each step's time, then RTO and RPO."""
    from homelab.backup.recover import Target
    from homelab.backup.recover import recover as run

    target = Target(
        remote=remote,
        password=_secret(password_file, "crypt password"),
        salt=_secret(salt_file, "crypt salt"),
        config_dir=config_dir.resolve(),
        at=at.replace(tzinfo=UTC) if at and at.tzinfo is None else at,
        pool=pool,
        mountpoint=mountpoint,
        domain=domain,
        replace=replace,
        folders=folders,
        stall_timeout=stall_timeout,
    )
    engine = None
    if not no_start:
        from homelab.engine.interface import engine_for
        from homelab.runtime.docker import Docker

        Docker().check()  # before the datasets are restored, not after
        engine = engine_for
    result = run(target, engine=engine, say=typer.echo)
    for line in result.sentinels:
        typer.echo(f"sentinel {line}")
    typer.echo(
        f"recovered {result.run}: RTO {result.rto:.1f}s, RPO {result.rpo / 3600:.1f}h "
        f"(the data is as of the backup {result.rpo:.0f}s before the end of the recovery)"
    )
