"""Benchmark `homelab up` on this machine's engine (printed, not asserted).

1. The first full `up` of the stand-in stacks (edge + media + cloud + dev, all five apps): time until
   every service is healthy (the tests' fast-healthcheck override applies; see tests/docker/dockerlab.py).
2. A no-op `up` over all stacks, run in-process N times: wall time, and the share spent in our own code
   (render, plan, decisions) vs waiting on docker/compose subprocesses (the union of their intervals;
   compose's `config --hash` calls run in parallel).

Usage: .venv/bin/python bench/up.py [--runs 5]. Needs what the docker tests need (scripts/apt/docker.txt);
builds the homelab-test/* images, starts Pebble, and removes everything it created at the end.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "docker"))

import dockerlab  # noqa: E402
import standins  # noqa: E402

APPS = {
    "plex": {"transcode_device": None},
    "nextcloud": {"subdomain": "cloud"},
    "gitea": {"subdomain": "git"},
    "jenkins": {"subdomain": "ci"},
    "rstudio": {},
}


class SubprocessClock:
    """Wraps homelab.runtime.process.run: records each call's interval."""

    def __init__(self) -> None:
        from homelab.runtime import process

        self.process = process
        self.original = process.run
        self.intervals: list[tuple[float, float, str]] = []
        self.lock = threading.Lock()

    def __enter__(self) -> SubprocessClock:
        def timed(argv, *args, **kwargs):  # type: ignore[no-untyped-def]
            start = time.perf_counter()
            try:
                return self.original(argv, *args, **kwargs)
            finally:
                with self.lock:
                    self.intervals.append((start, time.perf_counter(), " ".join(map(str, argv[:3]))))

        self.process.run = timed
        return self

    def __exit__(self, *exc: object) -> None:
        self.process.run = self.original

    def busy(self) -> float:
        """Seconds during which at least one subprocess ran."""
        total, end = 0.0, float("-inf")
        for start, stop, _ in sorted(self.intervals):
            if stop <= end:
                continue
            total += stop - max(start, end)
            end = stop
        return total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="no-op runs to time")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="homelab-bench-"))
    os.environ["HOMELAB_COMPOSE"] = os.environ.get("HOMELAB_COMPOSE") or str(
        Path(sys.executable).parent / "docker-compose"
    )
    dockerlab.remove_homelab_resources()
    began = time.monotonic()
    (work / "pebble").mkdir()
    pebble, cert, processes = dockerlab.start_pebble(work / "pebble")
    try:
        (work / "images").mkdir()
        images = standins.build_all(work / "images", dockerlab.find_program("traefik"), cert)  # type: ignore[arg-type]
        print(f"setup (Pebble + images): {time.monotonic() - began:.1f}s")
        env = {"HOMELAB_COMPOSE": os.environ["HOMELAB_COMPOSE"]}
        lab = dockerlab.Deployment(
            work / "lab",
            env,
            pebble,
            images,
            {**APPS, "gitea": {"subdomain": "git", "ssh_port": dockerlab.free_port()}},
        )
        start = time.monotonic()
        lab.up("--timeout", "300")
        seconds = time.monotonic() - start
        print(f"first up, 4 stacks / {len(lab.containers())} services, to all healthy: {seconds:.1f}s")

        from typer.testing import CliRunner

        from homelab.cli import (
            app,
            commands,  # noqa: F401
        )

        runner = CliRunner()
        walls, busies = [], []
        for _ in range(args.runs):
            with SubprocessClock() as clock:
                start = time.perf_counter()
                result = runner.invoke(app, ["up", "--config", str(lab.config)])
                wall = time.perf_counter() - start
            assert result.exit_code == 0 and "no changes" in result.output, result.output
            walls.append(wall)
            busies.append(clock.busy())
        wall, busy = statistics.median(walls), statistics.median(busies)
        print(
            f"no-op up over all stacks (median of {args.runs}): {wall:.2f}s wall "
            f"(target < 3 s); {wall - busy:.2f}s in homelab ({(wall - busy) / wall:.0%}), "
            f"{busy:.2f}s waiting on docker/compose ({busy / wall:.0%})"
        )
        print("subprocesses of the last run:")
        for start, stop, what in sorted(clock.intervals):
            print(f"  {stop - start:6.3f}s  {what}")
        lab.homelab("down", check=False)
    finally:
        dockerlab.stop(processes)
        dockerlab.remove_homelab_resources()
        standins.remove_all()
    return 0


if __name__ == "__main__":
    sys.exit(main())
