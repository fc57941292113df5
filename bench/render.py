"""Wall time of `homelab --help`, `homelab validate`, `homelab render` and `homelab plan` on the bundled example.

Each command runs as a fresh process (what a user waits for), five times by default; medians are printed
next to the targets of issue 13 (--help < 0.10 s, validate < 0.20 s, render + plan < 0.50 s, median of 5
on a quiet box), as a fraction of the target, and as ratios to a bare `python -c pass` start-up measured
in the same run. The CPU time (user + sys) of each command and the fastest run are printed too, and the
load average before and after: on a busy machine (the 2-core CI box is shared) they move much less than
the median wall time, so a loaded machine shows as such instead of as a regression.

With --instructions, each command also runs once under valgrind, which counts the instructions it
executes: a number that stays put however busy the machine is (about 7 G instructions a second here,
when quiet), to compare two versions on a shared box.

    .venv/bin/python bench/render.py [--runs N] [--instructions]
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# the console script, as a user runs it (`python -m homelab` adds runpy's import, about 10 ms)
_SCRIPT = Path(sys.executable).parent / "homelab"
HOMELAB = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "homelab"]


# As installed for a user: bytecode caches written and used (some sandboxes set PYTHONDONTWRITEBYTECODE,
# which would make every run compile every module again).
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def median_seconds(argv: list[str], runs: int, cwd: Path, warm: bool = True) -> tuple[float, float, float]:
    """(median wall seconds, fastest wall seconds, median CPU seconds) of `runs` fresh runs."""
    walls, cpus = [], []
    if warm:  # bytecode and page caches, as on a machine that has run homelab before
        subprocess.run([*HOMELAB, "--help"], cwd=cwd, check=True, capture_output=True, env=ENV)
    for _ in range(runs):
        cpu = _children_cpu()
        start = time.perf_counter()
        subprocess.run(argv, cwd=cwd, check=True, capture_output=True, env=ENV)
        walls.append(time.perf_counter() - start)
        cpus.append(_children_cpu() - cpu)
    return statistics.median(walls), min(walls), statistics.median(cpus)


def instructions(argv: list[str], cwd: Path) -> int:
    """Instructions one run executes, as valgrind's callgrind counts them."""
    valgrind = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"]
    env = {**ENV, "PYTHONHASHSEED": "0"}  # the same dict and set layouts on every run
    proc = subprocess.run([*valgrind, *argv], cwd=cwd, check=True, capture_output=True, text=True, env=env)
    found = re.search(r"Collected : (\d+)", proc.stderr)
    assert found, proc.stderr
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--instructions", action="store_true", help="also count instructions (valgrind)")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        shutil.copy(REPO / "examples" / "homelab.yaml", work / "homelab.yaml")
        (work / "secrets").mkdir(mode=0o700)
        for name in ("ddns-password", "b2-account", "b2-key"):
            path = work / "secrets" / name
            path.write_text("bench\n")
            path.chmod(0o600)
        python = median_seconds([sys.executable, "-c", "pass"], args.runs, work)
        help_ = median_seconds([*HOMELAB, "--help"], args.runs, work)
        validate = median_seconds([*HOMELAB, "validate"], args.runs, work)
        first = median_seconds([*HOMELAB, "render"], 1, work)
        render = median_seconds([*HOMELAB, "render"], args.runs, work)  # re-render: the no-change path
        plan = median_seconds([*HOMELAB, "plan"], args.runs, work)
        counted: dict[str, int] = {}
        if args.instructions:  # the script through the interpreter: valgrind runs a binary
            counted["pass"] = instructions([sys.executable, "-c", "pass"], work)
            homelab = [sys.executable, str(_SCRIPT)] if _SCRIPT.exists() else HOMELAB
            for command in ("--help", "validate", "render", "plan"):
                counted[command] = instructions([*homelab, command], work)
    both = (render[0] + plan[0], render[1] + plan[1], render[2] + plan[2])
    rows = [
        ("python -c pass (baseline)", python, None),
        ("homelab --help", help_, 0.10),
        ("homelab validate", validate, 0.20),
        ("homelab render (first, writes all)", first, None),
        ("homelab render (no change)", render, None),
        ("homelab plan", plan, None),
        ("render + plan", both, 0.50),
    ]
    load = f"load average (1 min) {load_before:.2f} before, {os.getloadavg()[0]:.2f} after"
    print(f"{load}, on {os.cpu_count()} CPUs; median of {args.runs} runs each")
    columns = f"{'wall s':>7} {'fastest':>7} {'cpu s':>7} {'x python':>9} {'target s':>9} {'of target':>9}"
    print(f"{'command':36} {columns}  verdict (median)")
    for name, (wall, fastest, cpu), target in rows:
        verdict = "" if target is None else ("ok" if wall < target else "OVER")
        target_text = f"{target:9.2f} {wall / target:9.0%}" if target else f"{'-':>9} {'-':>9}"
        print(f"{name:36} {wall:7.3f} {fastest:7.3f} {cpu:7.3f} {wall / python[0]:9.1f} {target_text}  {verdict}")

    if counted:
        counted["render + plan"] = counted["render"] + counted["plan"]
        print("instructions, one run each (valgrind)")
        for key, count in counted.items():
            print(f"{key:36} {count / 1e9:7.3f} G {count / counted['pass']:9.1f} x python")


if __name__ == "__main__":
    main()
