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

With --base DIR (a checkout of another version, e.g. `git archive main | tar -x -C /tmp/base`), that
version's homelab/ is measured in the same run, each command right after this one's, and printed below it.

    .venv/bin/python bench/render.py [--runs N] [--instructions] [--base DIR]
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


def median_seconds(
    argv: list[str], runs: int, cwd: Path, env: dict[str, str] = ENV, warm: bool = True
) -> tuple[float, float, float]:
    """(median wall seconds, fastest wall seconds, median CPU seconds) of `runs` fresh runs."""
    walls, cpus = [], []
    if warm:  # bytecode and page caches, as on a machine that has run homelab before
        subprocess.run([*HOMELAB, "--help"], cwd=cwd, check=True, capture_output=True, env=env)
    for _ in range(runs):
        cpu = _children_cpu()
        start = time.perf_counter()
        subprocess.run(argv, cwd=cwd, check=True, capture_output=True, env=env)
        walls.append(time.perf_counter() - start)
        cpus.append(_children_cpu() - cpu)
    return statistics.median(walls), min(walls), statistics.median(cpus)


def instructions(argv: list[str], cwd: Path, env: dict[str, str] = ENV) -> int:
    """Instructions one run executes, as valgrind's callgrind counts them."""
    valgrind = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"]
    env = {**env, "PYTHONHASHSEED": "0"}  # the same dict and set layouts on every run
    proc = subprocess.run([*valgrind, *argv], cwd=cwd, check=True, capture_output=True, text=True, env=env)
    found = re.search(r"Collected : (\d+)", proc.stderr)
    assert found, proc.stderr
    return int(found.group(1))


def _example(work: Path) -> None:
    shutil.copy(REPO / "examples" / "homelab.yaml", work / "homelab.yaml")
    (work / "secrets").mkdir(mode=0o700)
    for name in ("ddns-password", "b2-account", "b2-key"):
        path = work / "secrets" / name
        path.write_text("bench\n")
        path.chmod(0o600)


Timing = tuple[float, float, float]


COMMANDS = {"--help": ["--help"], "validate": ["validate"], "first render": ["render"], "render": ["render"]}
COMMANDS["plan"] = ["plan"]  # render (no change) runs after the first render: the no-change path


def _measure(versions: list[tuple[Path, dict[str, str]]], runs: int, count: bool) -> list[dict[str, Timing]]:
    """Each command's timings per version (a work folder, the environment that imports that version),
    the versions' runs of one command one after the other, so a change in the machine's load hits all."""
    timed: list[dict[str, Timing]] = [{} for _ in versions]
    for key, args in COMMANDS.items():
        for (work, env), rows in zip(versions, timed, strict=True):
            rows[key] = median_seconds([*HOMELAB, *args], 1 if key == "first render" else runs, work, env)
    for rows in timed:
        rows["render + plan"] = (
            rows["render"][0] + rows["plan"][0],
            rows["render"][1] + rows["plan"][1],
            rows["render"][2] + rows["plan"][2],
        )
    return timed


def _count(work: Path, env: dict[str, str]) -> dict[str, int]:
    homelab = [sys.executable, str(_SCRIPT)] if _SCRIPT.exists() else HOMELAB  # valgrind runs a binary
    counted = {command: instructions([*homelab, command], work, env) for command in ("--help", "validate", "render")}
    counted["plan"] = instructions([*homelab, "plan"], work, env)
    counted["render + plan"] = counted["render"] + counted["plan"]
    return counted


TARGETS = {"--help": 0.10, "validate": 0.20, "render + plan": 0.50}  # seconds, issue 13
NAMES = {
    "--help": "homelab --help",
    "validate": "homelab validate",
    "first render": "homelab render (first, writes all)",
    "render": "homelab render (no change)",
    "plan": "homelab plan",
    "render + plan": "render + plan",
}


def _verdict(seconds: float, target: float | None) -> str:
    return "" if target is None else ("ok" if seconds < target else "OVER")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--instructions", action="store_true", help="also count instructions (valgrind)")
    parser.add_argument(
        "--base", type=Path, help="another checkout (its homelab/ imported instead), measured in the same run"
    )
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    versions = [(Path("this"), ENV)]
    if args.base:
        versions.append((Path("base"), {**ENV, "PYTHONPATH": str(args.base.resolve())}))
    with tempfile.TemporaryDirectory() as tmp:
        python = median_seconds([sys.executable, "-c", "pass"], args.runs, Path(tmp))
        pass_count = instructions([sys.executable, "-c", "pass"], Path(tmp)) if args.instructions else 0
        versions = [(Path(tmp) / name, env) for name, env in versions]
        for work, _env in versions:
            work.mkdir()
            _example(work)
        timed = _measure(versions, args.runs, args.instructions)
        counted = [_count(work, env) for work, env in versions] if args.instructions else []
    load = f"load average (1 min) {load_before:.2f} before, {os.getloadavg()[0]:.2f} after"
    print(f"{load}, on {os.cpu_count()} CPUs; median of {args.runs} runs each")
    print("verdicts: wall (median) and CPU (user + sys, median) against the target; on a busy machine trust CPU")
    columns = f"{'wall s':>7} {'fastest':>7} {'cpu s':>7} {'x python':>9} {'target s':>9} {'of target':>9}"
    print(f"{'command':42} {columns}  {'wall':5} {'cpu':5}")
    print(f"{'python -c pass (baseline)':42} {python[0]:7.3f} {python[1]:7.3f} {python[2]:7.3f} {1:9.1f}")
    for version, rows in zip(("", "base: "), timed, strict=False):
        for key, (wall, fastest, cpu) in rows.items():
            target = TARGETS.get(key)
            target_text = f"{target:9.2f} {wall / target:9.0%}" if target else f"{'-':>9} {'-':>9}"
            verdicts = f"{_verdict(wall, target):5} {_verdict(cpu, target):5}"
            name = version + NAMES[key]
            print(f"{name:42} {wall:7.3f} {fastest:7.3f} {cpu:7.3f} {wall / python[0]:9.1f} {target_text}  {verdicts}")
    if counted:
        print("instructions, one run each (valgrind)" + (f"; base: {args.base}" if args.base else ""))
        print(f"{'python -c pass':42} {pass_count / 1e9:7.3f} G")
        for key, count in counted[0].items():
            line = f"{NAMES[key]:42} {count / 1e9:7.3f} G {count / pass_count:9.1f} x python"
            if len(counted) > 1:
                line += f"   base {counted[1][key] / 1e9:7.3f} G  ({count / counted[1][key] - 1:+.1%})"
            print(line)


if __name__ == "__main__":
    main()
