"""What backups leave on the host: typed JSON records, the running marker, a lock, files for monitoring.

Layout of the state folder (default `<storage.mountpoint>/.homelab/backup`):
  runs/<run-id>.json        one record per run (homelab.backup.records.Run)
  manifests/<run>-<key>.json.gz   what the snapshot a run uploaded holds: names, owners, modes, mtimes
                            (homelab.backup.tree; restore and drill read it)
  drills/<id>.json, verify/<id>.json
  running.json              the run in progress and the snapshots it reads (pruning never touches them)
  running/<dataset>.lock    the datasets a live run holds, for other code (homelab.backup.lock)
  <remote>.last_success     epoch seconds of the last successful run (the collectd exec program reads it)
  private/rclone.conf       the rclone config; private/logs: rclone's logs and the file lists handed to it
Every folder holding file names (records name failed files) is 0700 with 0600 files; only the
`.last_success` files are world-readable, for monitoring. A record that does not parse is an error naming
the file: a run silently missing could leave the snapshot of the last good run unprotected at prune time.
"""

from __future__ import annotations

import contextlib
import fcntl
import gzip
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TypeVar

from pydantic import ValidationError

from homelab.backup import tree
from homelab.backup.records import Drill, Record, RecoveryDrill, Run, Running, Verify
from homelab.errors import HomelabError
from homelab.layout import RECOVERY_DRILL_STATUS

PRIVATE_DIRS = ("private", "runs", "manifests", "drills", "recovery-drills", "verify")
R = TypeVar("R", bound=Record)


class StateError(HomelabError):
    """The state folder holds something we cannot read; the message names the file."""


def write_private(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Atomically (a temporary file renamed over it), with `mode` from creation on."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    tmp.chmod(mode)
    tmp.replace(path)


def read_record(path: Path, model: type[R]) -> R:
    try:
        return model.model_validate_json(path.read_bytes())
    except OSError as exc:
        raise StateError(f"{path}: cannot read backup record: {exc.strerror}") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(file)"
        raise StateError(
            f"{path}: not a readable {model.__name__.lower()} record ({where}: {first['msg']}); "
            "move it away to continue"
        ) from None


class State:
    def __init__(self, root: Path):
        self.root = root.absolute()  # zfs needs absolute mountpoints for the read clones under it

    @property
    def rclone_config(self) -> Path:
        return self.root / "private" / "rclone.conf"

    @property
    def logs(self) -> Path:
        return self.root / "private" / "logs"

    @property
    def mounts(self) -> Path:
        return self.root / "private" / "mnt"

    @property
    def scratch(self) -> Path:
        return self.root / "private"

    def ensure(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        for name in PRIVATE_DIRS:
            folder = self.root / name
            folder.mkdir(mode=0o700, exist_ok=True)
            folder.chmod(0o700)
        self.logs.mkdir(mode=0o700, exist_ok=True)

    # --- records ---
    def _save(self, kind: str, record_id: str, record: Record) -> None:
        write_private(self.root / kind / f"{record_id}.json", record.model_dump_json(indent=2).encode() + b"\n")

    def _load(self, kind: str, model: type[R]) -> list[R]:
        folder = self.root / kind
        if not folder.is_dir():
            return []
        return [read_record(path, model) for path in sorted(folder.glob("*.json"))]

    def runs(self) -> list[Run]:
        return sorted(self._load("runs", Run), key=lambda r: r.id)

    def save_run(self, record: Run) -> None:
        self._save("runs", record.id, record)

    def run_ids(self) -> set[str]:
        folder = self.root / "runs"
        return {p.stem for p in folder.glob("*.json")} if folder.is_dir() else set()

    def verifies(self) -> list[Verify]:
        return sorted(self._load("verify", Verify), key=lambda r: r.id)

    def save_verify(self, record: Verify) -> None:
        self._save("verify", record.id, record)

    def drills(self) -> list[Drill]:
        return sorted(self._load("drills", Drill), key=lambda r: r.id)

    def save_drill(self, record: Drill) -> None:
        self._save("drills", record.id, record)

    def recovery_drills(self) -> list[RecoveryDrill]:
        return sorted(self._load("recovery-drills", RecoveryDrill), key=lambda r: r.id)

    def save_recovery_drill(self, record: RecoveryDrill) -> None:
        self._save("recovery-drills", record.id, record)
        good = [r for r in self.recovery_drills() if r.result == "success"]
        last_good = int(good[-1].time.timestamp()) if good else 0
        failed = int(record.result != "success")
        write_private(self.root / RECOVERY_DRILL_STATUS, f"{last_good} {failed}\n".encode(), mode=0o644)

    def save_manifest(self, run_id: str, key: str, entries: list[tree.Entry]) -> str:
        path = self.root / "manifests" / f"{run_id}-{key.replace('/', '_')}.json.gz"
        write_private(path, gzip.compress(tree.dumps(entries), mtime=0))
        return str(path.relative_to(self.root))

    def manifest(self, relative: str) -> list[tree.Entry]:
        path = self.root / relative
        try:
            return tree.loads(gzip.decompress(path.read_bytes()))
        except (OSError, ValueError, TypeError, KeyError) as exc:
            raise StateError(f"{path}: not a readable file listing ({exc})") from None

    def has(self, relative: str) -> bool:
        return bool(relative) and (self.root / relative).exists()

    def mark_success(self, remote: str, epoch: int) -> None:
        write_private(self.root / f"{remote}.last_success", f"{epoch}\n".encode(), mode=0o644)

    # --- the running marker and the lock ---
    @property
    def running_path(self) -> Path:
        return self.root / "running.json"

    def mark_running(self, marker: Running) -> None:
        write_private(self.running_path, marker.model_dump_json(indent=2).encode() + b"\n")

    def clear_running(self) -> None:
        self.running_path.unlink(missing_ok=True)

    def running(self) -> Running | None:
        """The marker of a run in progress, if its process is alive (a kill -9 leaves a dead one behind)."""
        if not self.running_path.exists():
            return None
        marker = read_record(self.running_path, Running)
        return marker if alive(marker.pid) else None

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        self.ensure()
        fd = os.open(self.root / "private" / "lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                other = self.running()
                who = f" (pid {other.pid}, run {other.run})" if other else ""
                raise HomelabError(f"another backup is running{who}") from None
            yield
        finally:
            os.close(fd)  # closing releases the lock, whatever ended the run


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
