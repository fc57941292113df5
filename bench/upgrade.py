"""What an upgrade adds to a plain `compose up` of the same image change (printed, not asserted).

On a zfs-fuse pool (file vdev) and this machine's engine, one stack: the upgrade tests' app stand-in on a
dataset holding --data-mib MiB of files (1 GiB by default), and REAL PostgreSQL (tests/docker/
test_upgrade_dump.py's stand-in) on a dataset of its own holding --rows rows. Each repetition moves the app
from image A to image B three ways, going back to A (not timed) after each:
  compose: `docker compose up -d --wait` of the compose.yaml naming B (what a plain tool does);
  up:      homelab's apply without the upgrade guard (compose up + health gate + host preparation);
  upgrade: homelab's upgrade of the same change: refusal checks, journal, pg_dump into the Postgres
           dataset, snapshot of both datasets, compose up, health gate, record, retention.
Prints every run, the median ratio upgrade / compose (goal <= 1.3) and where the added time goes.

Usage: .venv/bin/python bench/upgrade.py [--repeat 5] [--data-mib 1024] [--rows 200000]
Needs root, the Docker Engine, zfs-fuse and Debian's postgresql-15 (as the docker tests). Takes the
machine locks the docker and zfs tests take (the engine's first), starts zfs-fuse if no pool answers, and
removes the containers, pool and images it made.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "tests" / "docker"), str(REPO)]

import standins  # noqa: E402
from dockerlab import remove_homelab_resources  # noqa: E402
from test_upgrade import STACK  # noqa: E402
from test_upgrade_dump import PgBox, postgres_image  # noqa: E402

from homelab.engine import compose as apply  # noqa: E402
from homelab.layout import COMPOSE_FILE  # noqa: E402
from homelab.ownership import write_owned  # noqa: E402
from homelab.upgrade import run as upgrade  # noqa: E402
from tests.conftest import find_program, machine_lock  # noqa: E402
from tests.storage.zfs import destroy_pool  # noqa: E402


class Timer:
    """Wraps a bound method of an object: the seconds spent in it since the last reset."""

    def __init__(self, owner: Any, name: str) -> None:
        self.seconds = 0.0
        original = getattr(owner, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - start

        setattr(owner, name, timed)


# stops at once on SIGTERM (a `sleep 1` loop would add up to a second of noise to every recreate)
RUN = "trap 'exit 0' TERM\nsleep 2147483647 &\nwait\n"


def app_images(work: Path) -> dict[str, str]:
    """Two versions of an app that is healthy as soon as it runs: only the image differs."""
    tags = {}
    for version in ("a", "b"):
        root = standins.Rootfs(work / f"bench-{version}.tar")
        root.busybox()
        root.file("entry", data=f"#!/bin/sh\n{RUN}".encode())
        root.file("health", data=b"#!/bin/sh\nexit 0\n")
        tags[version] = root.import_as(f"{standins.PREFIX}/upgrade-bench:{version}", 'ENTRYPOINT ["/entry"]')
    return tags


def make_datasets(work: Path, pool: str) -> list[Path]:
    subprocess.run(["truncate", "-s", "3G", str(work / "pool.img")], check=True)
    subprocess.run(
        ["zpool", "create", "-f", "-o", "cachefile=none", "-m", str(work / "pool"), pool, str(work / "pool.img")],
        check=True,
        capture_output=True,
    )
    folders = []
    for name in ("app", "pg"):
        subprocess.run(["zfs", "create", f"{pool}/{name}"], check=True, capture_output=True)
        folders.append(work / "pool" / name)
    return folders


def fill(folder: Path, mib: int) -> None:
    """`mib` files of 1 MiB of random bytes (incompressible), synced."""
    for i in range(mib):
        (folder / f"blob-{i:05d}").write_bytes(os.urandom(1 << 20))
    subprocess.run(["sync"], check=True)


def timed(action: Callable[[], object]) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def upgrade_once(box: PgBox, plan: Any, convergence: apply.Convergence, previous: dict[str, bytes]) -> None:
    """homelab's path for the change, from the refusal checks to the retention."""
    guard = upgrade.guard_for(convergence, plan, box.out, box.docker, previous, True, 120, lambda _m: None, zfs=box.zfs)
    apply.apply(convergence, plan, box.docker, timeout=120, zfs=box.zfs, guard=guard)


def run(args: argparse.Namespace, work: Path) -> None:
    pool = f"hlupbench{os.getpid()}"
    app_data, pg_data = make_datasets(work, pool)
    try:
        versions = app_images(work)
        box = PgBox(
            work / "stacks", f"{pool}/app", app_data, versions, pg_dataset=f"{pool}/pg", pg_data=pg_data,
            image=postgres_image(work),
        )  # fmt: skip
        began = time.perf_counter()
        fill(app_data, args.data_mib)
        print(f"filled {args.data_mib} MiB in {time.perf_counter() - began:.1f}s")
        box.up("a")
        box.sql("-c", "CREATE TABLE notes (id int PRIMARY KEY, body text)")
        count = int(args.rows)
        box.sql("-c", f"INSERT INTO notes SELECT g, md5(g::text) FROM generate_series(1, {count}) g")  # noqa: S608
        dump, snapshot, compose_up = (
            Timer(box.docker, "exec_to_file"),
            Timer(box.zfs, "snapshot"),
            Timer(box.docker, "up"),
        )
        project, folder = f"homelab-{STACK}", box.out / STACK

        def back_to_a() -> None:
            write_owned(box.out, {f"{STACK}/{COMPOSE_FILE}": yaml.safe_dump(box.compose("a")).encode()})
            box.docker.up(project, folder, timeout=120)

        rows = []
        for _ in range(args.repeat):
            box.render("b")
            t_compose = timed(lambda: box.docker.up(project, folder, timeout=120))
            back_to_a()
            plan, convergence, _ = box.render("b")
            t_up = timed(lambda: apply.apply(convergence, plan, box.docker, timeout=120, zfs=box.zfs))  # noqa: B023
            back_to_a()
            plan, convergence, previous = box.render("b")
            for timer in (dump, snapshot, compose_up):
                timer.seconds = 0.0
            t_upgrade = timed(lambda: upgrade_once(box, plan, convergence, previous))  # noqa: B023
            rows.append((t_compose, t_up, t_upgrade, dump.seconds, snapshot.seconds, compose_up.seconds))
            back_to_a()
        size = (pg_data / upgrade.DUMP_FILE).stat().st_size
        used = subprocess.run(
            ["zfs", "get", "-Hp", "-o", "value", "used", f"{pool}/app"], capture_output=True, text=True
        )
        print(f"app dataset: {int(used.stdout) >> 20} MiB used; Postgres: {args.rows} rows, dump {size >> 20} MiB")
        print("run  compose s  up s  upgrade s  upgrade/compose  dump s  snapshot s  compose-in-upgrade s")
        for n, (c, u, g, d, s, cu) in enumerate(rows):
            print(f"{n:3} {c:10.2f} {u:5.2f} {g:10.2f} {g / c:16.2f} {d:7.2f} {s:11.2f} {cu:20.2f}")
        ratio = statistics.median(g / c for c, _, g, *_ in rows)
        print(f"median upgrade / plain compose up: {ratio:.2f} (goal <= 1.3)")
        print(f"median upgrade / homelab up without the guard: {statistics.median(g / u for _, u, g, *_ in rows):.2f}")
        print(
            f"median added: dump {statistics.median(r[3] for r in rows):.2f}s, "
            f"snapshot {statistics.median(r[4] for r in rows):.2f}s, "
            f"the rest (journal, checks, gate, record, retention) "
            f"{statistics.median(r[2] - r[3] - r[4] - r[5] for r in rows):.2f}s"
        )
    finally:
        remove_homelab_resources()
        destroy_pool(pool)
        subprocess.run(["docker", "image", "rm", "-f", *(f"{standins.PREFIX}/upgrade-bench:{v}" for v in "ab")],
                       capture_output=True, check=False)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--data-mib", type=int, default=1024, help="MiB of files in the app's dataset")
    parser.add_argument("--rows", type=int, default=200_000, help="rows in the Postgres table dumped")
    args = parser.parse_args()
    os.environ.setdefault("HOMELAB_COMPOSE", find_program("docker-compose") or "docker-compose")
    with machine_lock("homelab-docker-tests"), machine_lock("homelab-zfs-fuse"):
        started = None
        if subprocess.run(["zpool", "list"], capture_output=True, check=False).returncode != 0:
            started = subprocess.Popen(["zfs-fuse", "--no-daemon"])
            time.sleep(2)
        with tempfile.TemporaryDirectory(prefix="homelab-upgrade-bench-") as work:
            os.environ["HOMELAB_BACKUP_STATE"] = str(Path(work) / "backup-state")
            try:
                run(args, Path(work))
            finally:
                if started:
                    started.terminate()


if __name__ == "__main__":
    main()
