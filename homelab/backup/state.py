"""What backups leave on the host: JSON records, the running marker, a lock, and files for monitoring.

Layout of the state folder (default `<storage.mountpoint>/.homelab/backup`, readable by collectd):
  runs/<run-id>.json        one record per run: start, end, bytes, files, result, each dataset's outcome
  manifests/<run>-<key>.json.gz   what the snapshot a run uploaded holds: names, owners, modes, mtimes
                            (homelab.backup.tree; restore --at and drill read it)
  drills/<id>.json, verify/<id>.json
  running.json              the run in progress and the snapshots it reads (pruning never touches them)
  <remote>.last_success     epoch seconds of the last successful run (the collectd exec program reads it)
  private/rclone.conf       0600 in a 0700 folder
"""

from __future__ import annotations

import contextlib
import fcntl
import gzip
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from homelab.backup import tree
from homelab.errors import HomelabError


def write_json(path: Path, data: Any, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=2, sort_keys=True, ensure_ascii=False)
        handle.write("\n")
    tmp.replace(path)


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


class State:
    def __init__(self, root: Path):
        self.root = root

    @property
    def rclone_config(self) -> Path:
        return self.root / "private" / "rclone.conf"

    @property
    def logs(self) -> Path:
        return self.root / "private" / "logs"

    @property
    def mounts(self) -> Path:
        return self.root / "private" / "mnt"

    def ensure(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "private").mkdir(mode=0o700, exist_ok=True)
        (self.root / "private").chmod(0o700)
        self.logs.mkdir(exist_ok=True)  # rclone's logs and the file lists handed to it

    # --- records ---
    def runs(self) -> list[dict[str, Any]]:
        folder = self.root / "runs"
        if not folder.is_dir():
            return []
        records = []
        for path in sorted(folder.glob("*.json")):
            with contextlib.suppress(ValueError, OSError):
                records.append(read_json(path))
        return sorted(records, key=lambda r: r["id"])

    def save_run(self, record: dict[str, Any]) -> None:
        write_json(self.root / "runs" / f"{record['id']}.json", record)

    def run_ids(self) -> set[str]:
        folder = self.root / "runs"
        return {p.stem for p in folder.glob("*.json")} if folder.is_dir() else set()

    def save_manifest(self, run_id: str, key: str, entries: list[tree.Entry]) -> str:
        path = self.root / "manifests" / f"{run_id}-{key.replace('/', '_')}.json.gz"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(gzip.compress(tree.dumps(entries), mtime=0))
        return str(path.relative_to(self.root))

    def manifest(self, relative: str) -> list[tree.Entry]:
        return tree.loads(gzip.decompress((self.root / relative).read_bytes()))

    def save_event(self, kind: str, record: dict[str, Any]) -> None:
        write_json(self.root / kind / f"{record['id']}.json", record)

    def events(self, kind: str) -> list[dict[str, Any]]:
        folder = self.root / kind
        if not folder.is_dir():
            return []
        out = []
        for path in sorted(folder.glob("*.json")):
            with contextlib.suppress(ValueError, OSError):
                out.append(read_json(path))
        return sorted(out, key=lambda r: r["id"])

    def mark_success(self, remote: str, epoch: int) -> None:
        path = self.root / f"{remote}.last_success"
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(f"{epoch}\n")
        tmp.chmod(0o644)
        tmp.replace(path)

    # --- the running marker and the lock ---
    @property
    def running_path(self) -> Path:
        return self.root / "running.json"

    def running(self) -> dict[str, Any] | None:
        """The marker of a run in progress, if its process is alive."""
        try:
            marker = read_json(self.running_path)
        except (OSError, ValueError):
            return None
        pid = int(marker.get("pid", 0))
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass
        return marker

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        self.ensure()
        path = self.root / "private" / "lock"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                other = self.running()
                who = f" (pid {other['pid']}, run {other['run']})" if other else ""
                raise HomelabError(f"another backup is running{who}") from None
            yield
        finally:
            os.close(fd)
