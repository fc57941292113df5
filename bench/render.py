"""Wall time of `homelab render`, `homelab plan` and `homelab --help` on the bundled example.

Each command runs as a fresh process (what a user waits for), several times; medians are printed
next to the targets (render+plan < 1 s, --help < 0.3 s on the 2-core reference machine) and as
ratios to a bare `python -c pass` start-up measured in the same run, so a loaded machine shows as
such instead of as a regression.

    .venv/bin/python bench/render.py [--runs N]
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
HOMELAB = [sys.executable, "-m", "homelab"]


# As installed for a user: bytecode caches written and used (some sandboxes set PYTHONDONTWRITEBYTECODE,
# which would make every run compile every module again).
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def median_seconds(argv: list[str], runs: int, cwd: Path, warm: bool = True) -> float:
    samples = []
    if warm:  # bytecode and page caches, as on a machine that has run homelab before
        subprocess.run([*HOMELAB, "--help"], cwd=cwd, check=True, capture_output=True, env=ENV)
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, cwd=cwd, check=True, capture_output=True, env=ENV)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        shutil.copy(REPO / "examples" / "homelab.yaml", work / "homelab.yaml")
        (work / "secrets").mkdir(mode=0o700)
        for name in ("ddns-password", "b2-account", "b2-key"):
            path = work / "secrets" / name
            path.write_text("bench\n")
            path.chmod(0o600)
        python = median_seconds([sys.executable, "-c", "pass"], args.runs, work)
        first = median_seconds([*HOMELAB, "render"], 1, work)
        render = median_seconds([*HOMELAB, "render"], args.runs, work)  # re-render: the no-change path
        plan = median_seconds([*HOMELAB, "plan"], args.runs, work)
        help_ = median_seconds([*HOMELAB, "--help"], args.runs, work)
    rows = [
        ("python -c pass (baseline)", python, None),
        ("homelab render (first, writes all)", first, None),
        ("homelab render (no change)", render, None),
        ("homelab plan", plan, None),
        ("render + plan", render + plan, 1.0),
        ("homelab --help", help_, 0.3),
    ]
    print(f"{'command':40} {'median s':>9} {'x python':>9} {'target s':>9}  verdict")
    for name, seconds, target in rows:
        verdict = "" if target is None else ("ok" if seconds < target else "OVER")
        target_text = f"{target:.2f}" if target else "-"
        print(f"{name:40} {seconds:9.3f} {seconds / python:9.1f} {target_text:>9}  {verdict}")


if __name__ == "__main__":
    main()
