"""A scratch zfs-fuse pool for a benchmark: zfs-fuse started when no pool answers, a file vdev in a fresh
folder, and everything removed afterwards (the pool, the folder, the zfs-fuse started here)."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from tests.storage.zfs import destroy_pool


@contextlib.contextmanager
def scratch_pool(prefix: str, size: str) -> Iterator[tuple[Path, str]]:
    """(the work folder, the pool's name, mounted at <work>/pool-mnt); `size`: truncate's, e.g. 1G, 2048M."""
    started = None
    if subprocess.run(["zpool", "list"], capture_output=True, check=False).returncode != 0:
        started = subprocess.Popen(["zfs-fuse", "--no-daemon"])
        time.sleep(2)
    work = Path(tempfile.mkdtemp(prefix=f"homelab-{prefix}-"))
    pool = f"hl{prefix.replace('-', '')}{int(time.time()) % 100000}"
    try:
        vdev, mount = str(work / "pool.img"), str(work / "pool-mnt")
        subprocess.run(["truncate", "-s", size, vdev], check=True)
        create = ["zpool", "create", "-f", "-o", "cachefile=none", "-m", mount, pool, vdev]
        subprocess.run(create, check=True, capture_output=True)
        try:
            yield work, pool
        finally:
            destroy_pool(pool)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if started:
            started.terminate()
