"""A backup lab without zfs-fuse or rclone: the config of tests/backup/conftest.py, the dataset a plain
folder, ZFS the recording fake with files (ContentZfs), the remote a FakeRclone folder, a settable clock."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from homelab.backup import Context, context
from homelab.backup.snapshots import Snapshots
from homelab.config.loaded import LoadedConfig
from homelab.config.loader import load
from homelab.plan import build_plan
from homelab.runtime.zfs import Destroyed
from tests.backup.conftest import KEY
from tests.fakes.rclone import FakeRclone
from tests.fakes.zfs import FakeZfs
from tests.storage.zfs import write_config, write_secret

START = datetime(2025, 3, 1, 3, 0, tzinfo=UTC)


class Clock:
    def __init__(self, start: datetime = START):
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> datetime:
        self.now += timedelta(**delta)
        return self.now


class ContentZfs(FakeZfs):
    """The ZFS fake, with files: a snapshot copies the dataset's folder (owners, modes, mtimes kept), a
    clone's mountpoint gets the snapshot's files, destroying a clone empties its mountpoint (an unmount)."""

    def __init__(self, store: Path):
        super().__init__()
        self.store = store

    def add_dataset(self, name: str, path: Path) -> None:
        parts = name.split("/")
        self.add_pool(parts[0])
        for n in range(2, len(parts)):
            self.local.setdefault("/".join(parts[:n]), {})
        self.local[name] = {"mountpoint": str(path)}

    def _copy(self, full: str) -> Path:
        return self.store / full.replace("/", "_")

    def snapshot(self, dataset: str, name: str) -> str:
        full = super().snapshot(dataset, name)
        self.store.mkdir(parents=True, exist_ok=True)
        # cp -a, not copytree: sockets and FIFOs are part of a snapshot too
        subprocess.run(["cp", "-a", self.get(dataset, "mountpoint"), str(self._copy(full))], check=True)
        return full

    def clone(self, snapshot: str, name: str, properties: Mapping[str, str] | None = None) -> None:
        super().clone(snapshot, name, properties)
        target = Path(self.local[name]["mountpoint"])
        target.mkdir(parents=True, exist_ok=True)
        subprocess.run(["cp", "-a", f"{self._copy(snapshot)}/.", str(target)], check=True)

    def destroy(self, name: str) -> Destroyed:
        unmounts = self.local[name].get("mountpoint") if name in self.origin else None
        answer = super().destroy(name)
        if answer == "destroyed" and "@" in name:
            shutil.rmtree(self._copy(name))
        elif answer == "destroyed" and unmounts:
            for child in Path(unmounts).iterdir():
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child)
                else:
                    child.unlink()
        return answer

    def snapshot_dir(self, dataset: str, name: str) -> Path:
        return self._copy(f"{dataset}@{name}")


@dataclass
class FastLab:
    loaded: LoadedConfig
    config: Path
    data: Path
    dataset: str
    state: Path
    rclone: FakeRclone
    zfs: ContentZfs
    clock: Clock

    def ctx(self, **kwargs: object) -> Context:
        snapshots = Snapshots(self.zfs)
        options = {"state_dir": self.state, "clock": self.clock, "rclone": self.rclone, "snapshots": snapshots}
        return context(self.loaded, **{**options, **kwargs})  # type: ignore[arg-type]

    @property
    def current(self) -> Path:
        return self.rclone.root / "offsite" / "current" / KEY


def make_fast_lab(
    tmp_path: Path,
    backup: dict | None = None,
    apps: frozenset[str] = frozenset({"rstudio"}),
    *,
    key: str = KEY,
    extra: dict | None = None,
    secrets: dict[str, str] | None = None,
) -> FastLab:
    """`key`: the dataset the lab backs up; `extra`: more of homelab.yaml; `secrets`: files (relative to
    homelab.yaml's folder) the config names, written before it is loaded."""
    config = write_config(
        tmp_path / "cfg",
        pool="tank",
        mountpoint=tmp_path / "srv",
        apps=set(apps),
        remote_dir=tmp_path / "unused-remote",
        backup={"datasets": [key], **(backup or {})},
        extra=extra,
    )
    for relative, text in (secrets or {}).items():
        write_secret(config.parent / relative, text)
    loaded = load(config)
    (d,) = [d for d in build_plan(loaded).datasets if d.key == key]
    data = Path(d.path)
    data.mkdir(parents=True)
    zfs = ContentZfs(tmp_path / "snapshots")
    zfs.add_dataset(d.name, data)
    return FastLab(loaded, config, data, d.name, tmp_path / "state", FakeRclone(tmp_path / "remote"), zfs, Clock())
