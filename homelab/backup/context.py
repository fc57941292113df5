"""Everything a backup command needs, built once from the validated config: the datasets, the state folder,
the drivers (rclone, ZFS snapshots) and the clock. Tests hand in fakes of the drivers and a fixed clock."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from homelab import files
from homelab.backup import crypt, retention
from homelab.backup.records import LastGood
from homelab.backup.snapshots import Snapshots
from homelab.backup.state import State, write_private
from homelab.config.loaded import LoadedConfig
from homelab.config.models import Backup
from homelab.config.secretfiles import MAX_SECRET_BYTES
from homelab.errors import ConfigError, HomelabError
from homelab.plan import build_plan
from homelab.plan_model import Dataset
from homelab.runtime.docker import Engine
from homelab.runtime.rclone import Rclone, RcloneDriver
from homelab.secrets import generate, user_secret_values

STATE_ENV = "HOMELAB_BACKUP_STATE"
GENERATED_PASSWORD = "secrets/backup-crypt-password"  # noqa: S105 - a path, not a value
GENERATED_SALT = "secrets/backup-crypt-salt"


class BackupError(HomelabError):
    """A backup, verify, restore or drill step failed; the message names the cause."""


Clock = Callable[[], datetime]
Say = Callable[[str], None]


def utcnow() -> datetime:
    return datetime.now(UTC)


def quiet(_: str) -> None:
    """The default `say`: library callers that do not narrate."""


def default_state_dir(loaded: LoadedConfig) -> Path:
    explicit = os.environ.get(STATE_ENV)
    if explicit:
        return Path(explicit)
    return Path(loaded.config.backup_state_dir)


def _secret(loaded: LoadedConfig, named: str | None, generated: str, notes: list[str]) -> str:
    if named:
        return files.read_bytes(loaded.secret_path(named), MAX_SECRET_BYTES).decode("utf-8").rstrip("\r\n")
    path = loaded.base_dir / generated
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(generate() + "\n")
        notes.append(f"generated {path}: keep a copy somewhere safe, without it the backup cannot be read")
    return files.read_bytes(path, MAX_SECRET_BYTES).decode("utf-8").rstrip("\r\n")


@dataclass
class Context:
    loaded: LoadedConfig
    datasets: list[Dataset]
    state: State
    rclone: RcloneDriver
    snapshots: Snapshots
    remotes: list[str]
    clock: Clock = utcnow
    notes: list[str] = field(default_factory=list)
    crypt_secrets: tuple[str, str] = ("", "")  # the password and salt: never inside a recovery bundle
    engine: Engine | None = None  # for the bundle's database dumps and image IDs (homelab.backup.bundle)

    @property
    def backup(self) -> Backup:
        assert self.loaded.config.backup is not None  # context() refuses a config without one
        return self.loaded.config.backup

    @property
    def policy(self) -> retention.Policy:
        r = self.backup.retention
        return retention.Policy(r.hourly, r.daily, r.monthly)

    def select(self, only: list[str] | None) -> list[Dataset]:
        if not only:
            return self.datasets
        chosen = [d for d in self.datasets if d.key in only or d.name in only]
        unknown = set(only) - {d.key for d in chosen} - {d.name for d in chosen}
        if unknown:
            known = ", ".join(d.key for d in self.datasets)
            raise ConfigError([f"not a backed-up dataset: {', '.join(sorted(unknown))} (known: {known})"])
        return chosen

    def remote_path(self, remote: str, *parts: str) -> str:
        return f"{crypt.crypt_name(remote)}:" + "/".join(p.strip("/") for p in parts if p)

    def last_success(self, key: str, remote: str) -> LastGood | None:
        for record in reversed(self.state.runs()):
            for entry in record.datasets:
                if entry.key == key and entry.remote == remote and entry.ok:
                    return LastGood(run=record.id, start=record.start, end=record.end, entry=entry)
        return None


def _datasets(loaded: LoadedConfig, backup: Backup) -> list[Dataset]:
    plan = build_plan(loaded)
    if backup.datasets is None:
        return [d for d in plan.datasets if d.backup]
    wanted = set(backup.datasets)
    unknown = wanted - {d.key for d in plan.datasets}
    if unknown:  # a role of a disabled app: the catalog knows it (checked at load), this config has none
        where = loaded.where(("backup", "datasets", backup.datasets.index(min(unknown))))
        raise ConfigError([f"{where}: backup.datasets: not a dataset of an enabled app: {', '.join(sorted(unknown))}"])
    return [d for d in plan.datasets if d.key in wanted]


def context(
    loaded: LoadedConfig,
    *,
    state_dir: Path | None = None,
    clock: Clock = utcnow,
    remote: str | None = None,
    rclone: RcloneDriver | None = None,
    snapshots: Snapshots | None = None,
    read_only: bool = False,
    engine: Engine | None = None,
) -> Context:
    backup = loaded.config.backup
    if backup is None or not backup.enabled:
        raise ConfigError([f"{loaded.path}: backup: not configured (add a backup section with a remote)"])
    remotes = sorted(backup.remotes)
    if remote:
        if remote not in backup.remotes:
            raise ConfigError([f"no backup remote named {remote!r} (configured: {', '.join(remotes)})"])
        remotes = [remote]
    datasets = _datasets(loaded, backup)
    state = State(state_dir or default_state_dir(loaded))
    notes: list[str] = []
    driver = rclone or Rclone(state.rclone_config, state.logs, stall_timeout=backup.stall_timeout)
    password = salt = ""
    if not read_only:  # `backup status` reads records only: no folder, no generated password, no rclone.conf
        state.ensure()
        password = _secret(loaded, backup.crypt_password_file, GENERATED_PASSWORD, notes)
        salt = _secret(loaded, backup.crypt_salt_file, GENERATED_SALT, notes)
        values = user_secret_values(loaded)
        secret_options = {n: {k: values[v] for k, v in r.secret_options.items()} for n, r in backup.remotes.items()}
        config = crypt.config_text(driver, backup.remotes, secret_options, password, salt)
        write_private(state.rclone_config, config.encode())
    return Context(
        loaded, datasets, state, driver, snapshots or Snapshots(), remotes, clock, notes, (password, salt), engine
    )
