"""Snapshots and read access to them: `.zfs/snapshot/NAME` where it exists, else a read-only clone."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

from homelab.errors import CommandFailed
from homelab.runtime import process

READ_PARENT = "homelab-backup-read"  # <pool>/homelab-backup-read/<n>: our clones, nothing else lives there


def snapshot(dataset: str, name: str) -> str:
    full = f"{dataset}@{name}"
    process.run(["zfs", "snapshot", full], timeout=120)
    return full


def snapshots(dataset: str) -> list[str]:
    """Snapshot names (the part after @) of one dataset."""
    proc = process.run(
        ["zfs", "list", "-H", "-o", "name", "-t", "snapshot", "-r", "-d", "1", dataset], check=False, timeout=120
    )
    if proc.returncode != 0:  # zfs-fuse has no -d
        proc = process.run(["zfs", "list", "-H", "-o", "name", "-t", "snapshot"], timeout=120)
    return [line.split("@", 1)[1] for line in proc.stdout.splitlines() if line.startswith(dataset + "@")]


def destroy_snapshot(dataset: str, name: str) -> bool:
    """Destroy one snapshot; False (and nothing destroyed) while a verify or drill reads it through a clone."""
    if not name or "@" in name or "/" in name:
        raise ValueError(f"not a snapshot name: {name!r}")
    proc = process.run(["zfs", "destroy", f"{dataset}@{name}"], check=False, timeout=120)
    if proc.returncode == 0:
        return True
    if "dependent clones" in proc.stderr or "busy" in proc.stderr:
        return False
    raise CommandFailed.from_process(proc, [])


def exists(name: str) -> bool:
    return process.run(["zfs", "list", "-H", "-o", "name", name], check=False, timeout=60).returncode == 0


def _mountpoint(dataset: str) -> str:
    return process.run(["zfs", "get", "-H", "-o", "value", "mountpoint", dataset], timeout=60).stdout.strip()


def _read_parent(dataset: str) -> str:
    pool = dataset.split("/", 1)[0]
    parent = f"{pool}/{READ_PARENT}"
    if not exists(parent):
        process.run(["zfs", "create", "-o", "mountpoint=none", "-o", "canmount=off", parent], timeout=120)
    return parent


def clean_stale_clones(dataset: str) -> list[str]:
    """Destroy read clones left by an interrupted run (only clones, only under our parent); one that is busy
    is in use by a verify or drill running now and is left alone."""
    pool = dataset.split("/", 1)[0]
    parent = f"{pool}/{READ_PARENT}"
    if not exists(parent):
        return []
    proc = process.run(["zfs", "list", "-H", "-o", "name,origin", "-r", parent], timeout=60)
    removed = []
    for line in proc.stdout.splitlines():
        name, _, origin = line.partition("\t")
        if name != parent and origin not in ("", "-"):
            destroyed = process.run(["zfs", "destroy", name], check=False, timeout=120)
            if destroyed.returncode == 0:
                removed.append(name)
            elif "busy" not in destroyed.stderr:
                raise CommandFailed.from_process(destroyed, [])
    return removed


@contextlib.contextmanager
def open_snapshot(dataset: str, name: str, mount_base: Path) -> Iterator[Path]:
    """A directory with the snapshot's files, read-only; the clone (if one was needed) is destroyed after."""
    mountpoint = _mountpoint(dataset)
    if mountpoint.startswith("/"):
        snapdir = Path(mountpoint) / ".zfs" / "snapshot" / name
        if snapdir.is_dir():
            yield snapdir
            return
    parent = _read_parent(dataset)
    clone = f"{parent}/{dataset.replace('/', '_')}-{name}"
    target = mount_base / f"{dataset.replace('/', '_')}-{name}"
    target.mkdir(parents=True, exist_ok=True)
    if exists(clone):
        process.run(["zfs", "destroy", clone], timeout=120)
    process.run(
        ["zfs", "clone", "-o", "readonly=on", "-o", f"mountpoint={target}", f"{dataset}@{name}", clone], timeout=120
    )
    try:
        yield target
    finally:
        for _ in range(100):  # zfs-fuse says "busy" for a moment after the last reader closed its files
            destroyed = process.run(["zfs", "destroy", clone], check=False, timeout=120)
            if destroyed.returncode == 0 or "busy" not in destroyed.stderr:
                break
            time.sleep(0.05)
        with contextlib.suppress(OSError):
            target.rmdir()
