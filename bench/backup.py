"""Backup benchmark on a real zfs-fuse pool and a local-dir rclone crypt remote.

Prints: full `homelab backup run` vs plain `rclone sync` of the same snapshot to the same crypt remote
(overhead ratio, goal <= 1.10), a no-change incremental run as a share of the full run (goal <= 10 %),
and restore throughput. Needs root, zfs-fuse running (or it is started), rclone.

    .venv/bin/python bench/backup.py [--files 10000]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from homelab.backup import context, restore, run_backup  # noqa: E402
from homelab.backup.zfs import open_snapshot  # noqa: E402
from homelab.config.loader import load  # noqa: E402
from homelab.plan import build_plan  # noqa: E402
from homelab.storage import apply_storage  # noqa: E402
from tests.backup.conftest import KEY, fill  # noqa: E402
from tests.storage.zfs import destroy_pool, write_config  # noqa: E402


def timed(fn):
    start = time.monotonic()
    result = fn()
    return time.monotonic() - start, result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=10_000)
    args = parser.parse_args()
    started = None
    if subprocess.run(["zpool", "list"], capture_output=True, check=False).returncode != 0:
        started = subprocess.Popen(["zfs-fuse", "--no-daemon"])
        time.sleep(2)
    work = Path(tempfile.mkdtemp(prefix="homelab-bench-"))
    pool = f"hlbench{int(time.time()) % 100000}"
    subprocess.run(["truncate", "-s", "1G", str(work / "pool.img")], check=True)
    subprocess.run(
        ["zpool", "create", "-f", "-o", "cachefile=none", "-m", str(work / "pool-mnt"), pool, str(work / "pool.img")],
        check=True,
        capture_output=True,
    )
    try:
        remote = work / "remote"
        remote.mkdir()
        config = write_config(
            work / "cfg",
            pool=pool,
            mountpoint=work / "srv",
            apps={"rstudio"},
            remote_dir=remote,
            backup={"datasets": [KEY]},
        )
        loaded = load(config)
        plan = build_plan(loaded)
        apply_storage(plan)
        (d,) = [d for d in plan.datasets if d.key == KEY]
        fill(Path(d.path), small=args.files, large=3, large_size=8 << 20, sparse=64 << 20)
        ctx = context(loaded, state_dir=work / "state")

        # baseline: plain rclone sync of a snapshot to the same crypt remote (its own folder)
        subprocess.run(["zfs", "snapshot", f"{d.name}@bench"], check=True)
        with open_snapshot(d.name, "bench", work / "mnt") as snap:
            plain, _ = timed(
                lambda: ctx.rclone.run(
                    ["sync", str(snap), "hl-offsite-crypt:plain", "--links", "--transfers", "4", "--checkers", "8"]
                )
            )
        full, report = timed(lambda: run_backup(ctx))
        incremental, _ = timed(lambda: run_backup(ctx))
        size = report.record["bytes"]
        target = work / "restored"
        restore_time, _ = timed(lambda: restore(ctx, KEY, target))
        print(f"fixture: {report.record['files']} files, {size / 2**20:.1f} MiB")
        print(f"plain rclone sync:       {plain:7.2f} s")
        print(f"homelab backup run:      {full:7.2f} s  ratio {full / plain:.2f} (goal <= 1.10)")
        print(f"no-change incremental:   {incremental:7.2f} s  = {incremental / full:.1%} of full (goal <= 10 %)")
        print(
            f"restore:                 {restore_time:7.2f} s  = {size / 2**20 / restore_time:.1f} MiB/s, "
            f"{report.record['files'] / restore_time:.0f} files/s"
        )
    finally:
        destroy_pool(pool)
        shutil.rmtree(work, ignore_errors=True)
        if started:
            started.terminate()


if __name__ == "__main__":
    main()
