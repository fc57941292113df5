"""What a recovery starts from and whether it may: the target (options), the journal a stopped recovery
continues from, the bundle chosen on the remote and fetched, homelab.yaml rewritten for the new machine,
and the checks made before anything is written (a config or datasets already there, dumps cut short)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import yaml
from pydantic import Field

from homelab.backup import bundle, crypt
from homelab.backup.context import BackupError
from homelab.backup.records import Record
from homelab.backup.state import State, read_record, write_private
from homelab.errors import ExitCode
from homelab.runtime.rclone import Rclone, RcloneDriver, RcloneError

REMOTE = "recover"  # the crypt remote's name in the recovery's own rclone config
STATE_DIR = ".homelab-recover"
DUMP_HEAD = b"-- PostgreSQL database dump"
DUMP_TAIL = b"-- PostgreSQL database dump complete"


class RecoverError(BackupError):
    """Recovery stopped; the message says why, what was written and what was not."""


class TargetNotEmpty(RecoverError):
    """The machine already holds a homelab config or datasets with data (and no --replace)."""

    exit_code = ExitCode.REFUSED


@dataclass(frozen=True)
class Target:
    remote: str  # any rclone path holding the backups (`/srv/backup`, `:sftp,host=...:path`)
    password: str
    salt: str
    config_dir: Path
    at: datetime | None = None
    pool: str | None = None
    mountpoint: str | None = None
    domain: str | None = None
    replace: bool = False
    folders: bool = False  # plain folders instead of ZFS datasets
    stall_timeout: float = 300
    rclone_sections: str = ""  # rclone config sections `remote` may name (a drill: the backup's own remotes)


class Journal(Record):
    bundle: str  # the bundle's run
    written: list[str] = Field(default_factory=list)
    restored: list[str] = Field(default_factory=list)  # dataset keys restored completely
    dumps: list[str] = Field(default_factory=list)  # the bundle's dumps to load once their server runs
    finished: bool = False


def rclone_for(target: Target, state: State) -> RcloneDriver:
    driver = Rclone(state.rclone_config, state.logs, stall_timeout=target.stall_timeout)
    text = crypt.recovery_text(driver, REMOTE, target.remote, target.password, target.salt)
    write_private(state.rclone_config, (target.rclone_sections + "\n" + text).encode())
    return driver


def journal_path(state: State) -> Path:
    return state.root / "journal.json"


def read_journal(state: State) -> Journal | None:
    path = journal_path(state)
    return read_record(path, Journal) if path.is_file() else None


def save_journal(state: State, journal: Journal) -> None:
    write_private(journal_path(state), journal.model_dump_json(indent=1).encode())


def pick(driver: RcloneDriver, target: Target, resume: Journal | None) -> str:
    """The bundle to recover from: the journal's when continuing, else the newest (at or before --at)."""
    root = crypt.crypt_name(REMOTE) + ":"
    try:
        names = [n for n in driver.list_files(root + bundle.FOLDER) if n.endswith(bundle.SUFFIX)]
        if not names and not driver.list_dirs(root):
            held = driver.list_dirs(target.remote) + driver.list_files(target.remote)
    except RcloneError as exc:
        raise RecoverError(f"the remote {target.remote} cannot be read: {exc}") from None
    if not names:
        if driver.list_dirs(root):
            raise RecoverError(f"no recovery bundle on {target.remote}: only dataset backups (made before bundles)")
        if held:
            raise RecoverError(
                f"wrong crypt password or salt: none of the {len(held)} entries on {target.remote} decrypts"
            )
        raise RecoverError(f"no backup on {target.remote}: it is empty")
    runs = sorted(bundle.run_of(n) for n in names)  # by run id: `<stamp>-1.tar` sorts before `<stamp>.tar`
    if resume is not None:
        if resume.bundle not in runs:
            raise RecoverError(f"the bundle {resume.bundle} this recovery started from is gone from the remote")
        return resume.bundle
    if target.at is not None:
        limit = target.at.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
        runs = [r for r in runs if r.split("-")[0] <= limit]
        if not runs:
            raise RecoverError(f"no recovery bundle at or before {target.at.isoformat()} on {target.remote}")
    return runs[-1]


def fetch(driver: RcloneDriver, state: State, run: str) -> bundle.Bundle:
    name = f"{bundle.FOLDER}/{run}{bundle.SUFFIX}"
    local = state.scratch / f"{run}{bundle.SUFFIX}"
    try:
        driver.copyto(f"{crypt.crypt_name(REMOTE)}:{name}", str(local))
        data = local.read_bytes()
    except (RcloneError, OSError) as exc:
        raise RecoverError(f"bundle {name} could not be read (truncated or damaged?): {exc}") from None
    finally:
        local.unlink(missing_ok=True)
    return bundle.read(data, name)


# --- the config, rewritten for the new machine ------------------------------------------------------


def rewrite_config(original: bytes, target: Target) -> bytes:
    """homelab.yaml for the target: another pool, mountpoint or domain (the file as it was otherwise)."""
    if not (target.pool or target.mountpoint or target.domain):
        return original
    data = yaml.safe_load(original)
    storage = data.setdefault("storage", {})
    if target.pool:
        old_pool = storage.get("pool", "tank")
        storage["root"] = target.pool + str(storage.get("root", f"{old_pool}/homelab"))[len(old_pool) :]
        storage["pool"] = target.pool
    if target.mountpoint:
        old = str(storage.get("mountpoint", "/tank/homelab"))
        storage["mountpoint"] = target.mountpoint
        backup = data.get("backup") or {}
        if str(backup.get("state_dir", "")).startswith(old + "/"):
            backup["state_dir"] = target.mountpoint + backup["state_dir"][len(old) :]
    if target.domain:
        data.setdefault("domain", {})["name"] = target.domain
        data["domain"].setdefault("acme", {})["staging"] = True  # new names: staging first
    return yaml.safe_dump(data, sort_keys=False).encode()


def _mountpoint(config: bytes) -> str:
    return str(((yaml.safe_load(config) or {}).get("storage") or {}).get("mountpoint", "/tank/homelab"))


def _dataset_paths(original: bytes, config: bytes, manifest: bundle.Manifest) -> dict[str, str]:
    """key -> its folder on the target: the bundle's path moved from the old storage.mountpoint to the new."""
    old, new = _mountpoint(original), _mountpoint(config)
    return {d.key: new + d.path[len(old) :] if d.path.startswith(old) else d.path for d in manifest.datasets}


def _occupied(folder: Path) -> bool:
    return folder.is_dir() and any(p.name != ".zfs" for p in folder.iterdir())


def refusals(target: Target, found: bundle.Bundle, original: bytes, config: bytes, resume: Journal | None) -> list[str]:
    if target.replace or resume is not None:
        return []
    problems = []
    existing = target.config_dir / found.manifest.config_name
    if existing.exists():
        problems.append(f"{existing} exists: this machine already has a homelab config")
    for key, path in sorted(_dataset_paths(original, config, found.manifest).items()):
        if _occupied(Path(path)):
            problems.append(f"dataset {key} ({path}) is not empty")
    return problems


def check_dumps(found: bundle.Bundle) -> list[str]:
    """A dump that would not load: cut short or not pg_dump's (pg_dump ends every dump with its trailer)."""
    problems = []
    for dump in found.manifest.dumps:
        data = found.member(dump.member)
        if DUMP_HEAD not in data[:512] or DUMP_TAIL not in data[-512:]:
            problems.append(f"the dump of {dump.stack}/{dump.service} is not a complete pg_dump (it would not load)")
    return problems
