"""Real zfs-fuse pools on file vdevs for the storage and backup tests.

`zfs_daemon` (session): uses a running zfs-fuse/OpenZFS if `zpool list` answers, else starts
`zfs-fuse --no-daemon`; the last session using a daemon a session started stops it (only if no pool is
left). Sessions run beside each other (.ci/run runs the docker tests beside the other real ones).
`make_pool` creates a pool on a sparse file under a tmp dir; every pool made here is destroyed at teardown.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

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
_STARTED = Path("/tmp/homelab-zfs-fuse.pid")  # a daemon a test session started (not the system's own)


@pytest.fixture(scope="session")
def zfs_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    # Sessions share the daemon (each pool is named after its process): each holds the lock shared while it
    # uses it, so the session that ends last, and only it, may stop a daemon a session started.
    # tests/storage and tests/backup each register this fixture, so one session has two instances of it:
    # the second must not take the lock again.
    global _session_holds_daemon
    if _session_holds_daemon:
        yield
        return
    with Path("/tmp/homelab-zfs-fuse.lock").open("w") as users:
        fcntl.flock(users, fcntl.LOCK_SH)
        _session_holds_daemon = True
        try:
            with machine_lock("homelab-zfs-fuse-start"):  # one session at a time starts or stops it
                _zfs_daemon(tmp_path_factory)
            yield
        finally:
            _session_holds_daemon = False
            with machine_lock("homelab-zfs-fuse-start"):
                _stop_if_last(users)


def _zfs_daemon(tmp_path_factory: pytest.TempPathFactory) -> None:
    for program in ("zpool", "zfs"):
        if find_program(program) is None:
            missing(f"program {program!r} (Debian zfs-fuse)")
    if _zpool_ok():
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
    _STARTED.write_text(f"{proc.pid}\n")


def _stop_if_last(users: IO[str]) -> None:
    """Stop the daemon a session started when no other session uses it and no pool is left."""
    try:
        fcntl.flock(users, fcntl.LOCK_EX | fcntl.LOCK_NB)  # only when no other session holds it shared
    except BlockingIOError:
        return
    if not _STARTED.exists():
        return
    pools = subprocess.run(["zpool", "list", "-H", "-o", "name"], capture_output=True, text=True, check=False)
    if pools.stdout.strip():
        return
    pid = int(_STARTED.read_text())
    _STARTED.unlink()
    comm = Path(f"/proc/{pid}/comm")
    if not comm.exists() or comm.read_text().strip() != "zfs-fuse":  # gone (its number may be another's now)
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)  # this session's own child: reaped, not left a zombie
            time.sleep(0.1)
        os.kill(pid, signal.SIGKILL)


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
