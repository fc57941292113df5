"""The marker of a running backup that other code reads (homelab.backup.lock.running_datasets): held while a
run lives, gone after it, and a marker left by a killed run never counts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from homelab.backup import run_backup
from homelab.backup.lock import running_datasets
from tests.backup.conftest import fill
from tests.backup.fast import FastLab, make_fast_lab
from tests.fakes.rclone import FakeRclone

HOLD = """
import sys
from pathlib import Path
from homelab.backup.lock import holding
with holding(Path(sys.argv[1]), ["tank/homelab/a/b", "tank/x"], "run-1"):
    print("held", flush=True)
    sys.stdin.read()
"""


@pytest.fixture
def lab(tmp_path: Path) -> FastLab:
    lab = make_fast_lab(tmp_path)
    fill(lab.data, small=5, large=0, sparse=1 << 12)
    return lab


def test_a_run_marks_its_datasets_while_it_runs_and_not_after(lab: FastLab) -> None:
    ctx = lab.ctx()
    seen: list[set[str]] = []
    sync = lab.rclone.sync

    def watching_sync(*args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        seen.append(running_datasets(lab.state))
        marker = json.loads((lab.state / "running" / (lab.dataset.replace("/", "%") + ".lock")).read_text())
        assert marker["pid"] == os.getpid() and marker["dataset"] == lab.dataset
        return FakeRclone.sync(lab.rclone, *args, **kwargs)  # type: ignore[arg-type]

    lab.rclone.sync = watching_sync  # type: ignore[method-assign]
    run_backup(ctx)
    lab.rclone.sync = sync  # type: ignore[method-assign]
    assert seen == [{lab.dataset}]
    assert running_datasets(lab.state) == set()
    assert list((lab.state / "running").iterdir()) == []


def test_a_marker_left_by_a_killed_process_is_not_running(tmp_path: Path) -> None:
    assert running_datasets(tmp_path / "no-state-yet") == set()
    child = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(tmp_path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == "held\n"
        assert running_datasets(tmp_path) == {"tank/homelab/a/b", "tank/x"}
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert len(list((tmp_path / "running").glob("*.lock"))) == 2  # left behind by kill -9...
    assert running_datasets(tmp_path) == set()  # ...and not held by anyone
