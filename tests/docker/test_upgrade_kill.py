"""kill -9 of homelab at three points of an upgrade, on the real engine and zfs-fuse: the next `up` reads
the journal first and finishes the upgrade or rolls it back, and nothing is lost.

The killed process is a separate Python running homelab's `up` path (test_upgrade.Box.up: journal
recovery, render, converge, apply with the upgrade guard, real Docker/compose and zfs drivers); it is
killed with SIGKILL, with its whole process group (compose included, as a power cut or systemd's
control-group kill would), at:
1. "applying": dump and snapshots done, compose not started (HOMELAB_TEST_UPGRADE_HOLD stops it there);
2. while compose recreates the container with the new image (polled on the engine), before the gate;
3. "rolling-back": the gate failed, the journal says rolling back, nothing undone yet (the hold again).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from test_upgrade import STACK, Box, box, versions  # noqa: F401 - fixtures

from homelab.upgrade import journal as upgrade_journal
from homelab.upgrade import settle as upgrade_settle
from homelab.upgrade import undo as upgrade_undo
from tests.storage.zfs import make_pool, zfs_daemon  # noqa: F401 - fixtures

pytestmark = [pytest.mark.docker, pytest.mark.real]

HERE = Path(__file__).resolve().parent
DRIVER = (
    "import json, sys; from pathlib import Path; from test_upgrade import Box; a = json.loads(sys.argv[1]); "
    "Box(Path(a[0]), a[1], Path(a[2]), a[3]).up(a[4])"
)


def _kill_during(box: Box, version: str, reached: Callable[[Path], bool], hold: str = "") -> str:
    """Run an `up` to `version` in its own process group, SIGKILL the group once `reached(marker)`,
    return what it printed."""
    marker = box.out.parent / f"held-{time.monotonic_ns()}"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), str(HERE.parent.parent)]),
        upgrade_journal.HOLD_ENV: f"{hold}:{marker}" if hold else "",
    }
    log = box.out.parent / f"killed-{version}.log"
    args = json.dumps([str(box.out), box.dataset, str(box.data), box.versions, version])
    with log.open("wb") as output:
        proc = subprocess.Popen(
            [sys.executable, "-c", DRIVER, args], env=env, stdout=output, stderr=output, start_new_session=True
        )
    try:
        deadline = time.monotonic() + 180
        while not reached(marker):
            assert proc.poll() is None, f"the up ended before the kill point:\n{log.read_text()}"
            assert time.monotonic() < deadline, f"kill point never reached:\n{log.read_text()}"
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    assert proc.returncode == -signal.SIGKILL
    return log.read_text()


def _journal(box: Box) -> upgrade_journal.Record:
    (record,) = upgrade_journal.list_records(box.out)
    return record


def _images_of_project(box: Box) -> list[str]:
    out = subprocess.run(
        [
            "docker",
            "ps",
            "-a",
            "--filter",
            f"label=com.docker.compose.project=homelab-{STACK}",
            "--format",
            "{{.Image}}",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return out.split()


def test_killed_after_the_snapshot_the_next_up_finishes_the_upgrade(box: Box) -> None:
    box.up("v1")
    before = (box.data / "db").read_bytes()
    _kill_during(box, "v2-good", Path.exists, hold="applying")
    record = _journal(box)
    assert record.state == "applying" and record.snapshot in box.zfs.snapshots(box.dataset)
    assert box.running() == (box.versions["v1"], "healthy")  # killed before compose ran
    box.up("v2-good")  # the next up: journal first
    assert any("was interrupted while applying" in line for line in box.said), box.said
    assert box.running() == (box.versions["v2-good"], "healthy")
    record = _journal(box)
    assert record.state == "upgraded" and "finished by the next up" in record.notes[-1]
    assert (box.data / "db").read_bytes().startswith(b"format-2")
    upgrade_undo.rollback(
        box.out, box.docker, box.zfs, STACK, timeout=60, progress=box.said.append, decide=lambda _loss: True
    )
    assert (box.data / "db").read_bytes() == before  # nothing lost: v1's data is still there to go back to


def test_killed_while_compose_starts_the_new_version_the_next_up_rolls_the_bad_one_back(box: Box) -> None:
    box.up("v1")
    before = (box.data / "db").read_bytes()
    _kill_during(box, "v2-bad", lambda _marker: box.versions["v2-bad"] in _images_of_project(box))
    assert _journal(box).state == "applying"
    with pytest.raises(upgrade_settle.Held, match="rolled back"):  # the stack left as it is by this up
        box.up("v2-bad")
    assert box.running() == (box.versions["v1"], "healthy")
    assert (box.data / "db").read_bytes() == before
    record = _journal(box)
    assert record.state == "rolled-back"
    assert (box.out / upgrade_journal.RECORDS_DIR / record.folder_name / "app.log").is_file()


def test_killed_while_rolling_back_the_next_up_finishes_the_rollback(box: Box) -> None:
    box.up("v1")
    before = (box.data / "db").read_bytes()
    _kill_during(box, "v2-bad", Path.exists, hold="rolling-back")
    assert _journal(box).state == "rolling-back"
    assert box.running()[0] == box.versions["v2-bad"]  # the failed version is still there
    with pytest.raises(upgrade_settle.Held, match="interrupted rollback"):
        box.up("v2-bad")
    assert box.running() == (box.versions["v1"], "healthy")
    assert (box.data / "db").read_bytes() == before
    assert _journal(box).state == "rolled-back"
