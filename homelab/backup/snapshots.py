"""Snapshots and read access to them, on the ZFS driver: `.zfs/snapshot/NAME` where it exists, else a
read-only clone under `<pool>/homelab-backup-read` (zfs-fuse, `snapdir=disabled`), destroyed after."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

from homelab.runtime.zfs import Zfs, ZfsCli

READ_PARENT = "homelab-backup-read"  # <pool>/homelab-backup-read/<n>: our clones, nothing else lives there
BUSY_RETRIES = 100  # zfs-fuse says "busy" for a moment after the last reader closed its files
BUSY_WAIT = 0.05


class Snapshots:
    def __init__(self, zfs: Zfs | None = None):
        self.zfs: Zfs = zfs or ZfsCli()

    def snapshot(self, dataset: str, name: str) -> str:
        return self.zfs.snapshot(dataset, name)

    def names(self, dataset: str) -> list[str]:
        """Snapshot names (the part after @) of one dataset."""
        return self.zfs.snapshots(dataset)

    def destroy(self, dataset: str, name: str) -> bool:
        """Destroy one snapshot; False (and nothing destroyed) while a verify or drill reads it through a clone."""
        if not name or "@" in name or "/" in name:
            raise ValueError(f"not a snapshot name: {name!r}")
        return self.zfs.destroy(f"{dataset}@{name}") == "destroyed"

    def _parent(self, dataset: str) -> str:
        return f"{dataset.split('/', 1)[0]}/{READ_PARENT}"

    def clean_stale_clones(self, dataset: str) -> list[str]:
        """Destroy read clones left by an interrupted run (only clones, only under our parent); one that is busy
        is in use by a verify or drill running now and is left alone."""
        parent = self._parent(dataset)
        if not self.zfs.exists(parent):
            return []
        clones = [name for name, origin in self.zfs.origins(parent).items() if name != parent and origin]
        return [name for name in clones if self.zfs.destroy(name) == "destroyed"]

    @contextlib.contextmanager
    def open(self, dataset: str, name: str, mount_base: Path) -> Iterator[Path]:
        """A directory with the snapshot's files, read-only; the clone (if one was needed) is destroyed after."""
        mountpoint = self.zfs.get(dataset, "mountpoint")
        if mountpoint.startswith("/"):
            snapdir = Path(mountpoint) / ".zfs" / "snapshot" / name
            if snapdir.is_dir():
                yield snapdir
                return
        parent = self._parent(dataset)
        if not self.zfs.exists(parent):
            self.zfs.create(parent, {"mountpoint": "none", "canmount": "off"})
        clone = f"{parent}/{dataset.replace('/', '_')}-{name}"
        target = mount_base / f"{dataset.replace('/', '_')}-{name}"
        target.mkdir(parents=True, exist_ok=True)
        if self.zfs.exists(clone):
            self.zfs.destroy(clone)
        self.zfs.clone(f"{dataset}@{name}", clone, {"readonly": "on", "mountpoint": str(target)})
        try:
            yield target
        finally:
            self._destroy_clone(clone)
            with contextlib.suppress(OSError):
                target.rmdir()

    def _destroy_clone(self, clone: str) -> None:
        for _ in range(BUSY_RETRIES):
            if self.zfs.destroy(clone) != "busy":
                return
            time.sleep(BUSY_WAIT)


def open_snapshot(dataset: str, name: str, mount_base: Path) -> contextlib.AbstractContextManager[Path]:
    """For tests and the bench: read a snapshot with the real driver."""
    return Snapshots().open(dataset, name, mount_base)
