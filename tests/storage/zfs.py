"""Real zfs-fuse pools on file vdevs for the storage and backup tests.

`zfs_daemon` (session): uses a running zfs-fuse/OpenZFS if `zpool list` answers, else starts
`zfs-fuse --no-daemon` and stops it at the end (only if no pool is left). `make_pool` creates a pool on a
sparse file under a tmp dir; every pool made here is destroyed at teardown.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from tests.conftest import EXAMPLE, find_program, machine_lock, missing, write_secret

_counter = itertools.count()


def _zpool_ok() -> bool:
    zpool = find_program("zpool")
    if zpool is None:
        return False
    return subprocess.run([zpool, "list"], capture_output=True, check=False).returncode == 0


_session_holds_daemon = False


@pytest.fixture(scope="session")
def zfs_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    # One session at a time owns the zfs-fuse daemon: another session's teardown would stop it under us.
    # tests/storage and tests/backup each register this fixture, so one session has two instances of it:
    # the second must not take the lock again (flock on a second open file waits on the first for ever).
    global _session_holds_daemon
    if _session_holds_daemon:
        yield
        return
    with machine_lock("homelab-zfs-fuse"):
        _session_holds_daemon = True
        try:
            yield from _zfs_daemon(tmp_path_factory)
        finally:
            _session_holds_daemon = False


def _zfs_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    for program in ("zpool", "zfs"):
        if find_program(program) is None:
            missing(f"program {program!r} (Debian zfs-fuse)")
    if _zpool_ok():
        yield
        return
    daemon = find_program("zfs-fuse")
    if daemon is None:
        missing("program 'zfs-fuse' (Debian zfs-fuse)")
    log = tmp_path_factory.mktemp("zfs-fuse") / "zfs-fuse.log"
    with log.open("w") as out:
        proc = subprocess.Popen([daemon, "--no-daemon"], stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 15
    while not _zpool_ok():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"zfs-fuse did not start: {log.read_text()[-500:]}")
        time.sleep(0.2)
    yield
    pools = subprocess.run(["zpool", "list", "-H", "-o", "name"], capture_output=True, text=True, check=False)
    if not pools.stdout.strip():
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture
def make_pool(zfs_daemon: None, tmp_path: Path) -> Iterator[Callable[..., str]]:
    made: list[str] = []

    def _make(size: str = "256M", mountpoint: Path | None = None) -> str:
        name = f"hlt{os.getpid()}x{next(_counter)}"
        vdev = tmp_path / f"{name}.img"
        subprocess.run(["truncate", "-s", size, str(vdev)], check=True)
        mount = mountpoint or tmp_path / f"{name}-mnt"
        subprocess.run(
            ["zpool", "create", "-f", "-o", "cachefile=none", "-m", str(mount), name, str(vdev)],
            check=True,
            capture_output=True,
        )
        made.append(name)
        return name

    yield _make
    for name in made:
        destroy_pool(name)


def destroy_pool(name: str, attempts: int = 40) -> None:
    """zfs-fuse answers "pool is busy" for a moment after its datasets were used: retry."""
    for _ in range(attempts):
        proc = subprocess.run(["zpool", "destroy", "-f", name], capture_output=True, text=True, check=False)
        if proc.returncode == 0 or "no such pool" in proc.stderr:
            return
        time.sleep(0.25)
    raise AssertionError(f"could not destroy test pool {name}: {proc.stderr.strip()}")


def write_config(
    folder: Path,
    *,
    pool: str,
    mountpoint: Path,
    apps: set[str] | None = None,
    remote_dir: Path | None = None,
    extra: dict | None = None,
    backup: dict | None = None,
) -> Path:
    """homelab.yaml from the bundled example, pointed at a test pool (and a local backup remote)."""
    data = yaml.safe_load(EXAMPLE.read_text())
    data.pop("ddns", None)
    data["storage"] = {"pool": pool, "root": f"{pool}/homelab", "mountpoint": str(mountpoint)}
    if apps is not None:
        for app in data["apps"]:
            data["apps"][app]["enabled"] = app in apps
        data["monitoring"]["enabled"] = "monitoring" in apps
    if remote_dir is not None:
        data["backup"] = {
            "remotes": {"offsite": {"type": "local", "path": str(remote_dir)}},
            "schedule": "*-*-* 03:00:00",
            "retention": {"hourly": 24, "daily": 30, "monthly": 12},
            "sentinels": False,  # the backup tests compare exact trees; the recovery tests turn them on
            **(backup or {}),
        }
    else:
        data.pop("backup", None)
    for key, value in (extra or {}).items():
        data[key] = value
    folder.mkdir(parents=True, exist_ok=True)
    write_secret(folder / "secrets" / "unused", "x")
    path = folder / "homelab.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def zfs_get(name: str, prop: str) -> str:
    return subprocess.run(
        ["zfs", "get", "-H", "-p", "-o", "value", prop, name], capture_output=True, text=True, check=True
    ).stdout.strip()
