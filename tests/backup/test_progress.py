"""Runs that take a while: a progress bar on a terminal, plain lines on a pipe; each object checked by hash
as crypt uploads it, and where the remote gave no hash, cryptchecked as soon as it is written (while the
sync is still uploading others)."""

from __future__ import annotations

import json
import os
import pty
import subprocess
from datetime import datetime
from pathlib import Path

import pytest

from homelab.backup import check, context, run_backup
from homelab.runtime import rclone_log
from tests.backup.conftest import Lab, cli_argv, fill

pytestmark = pytest.mark.real

SLOW = {"RCLONE_BWLIMIT": "4M"}  # ~3 s for the fixture, so rclone reports stats more than once


def _on_a_terminal(lab: Lab) -> str:
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        cli_argv(lab, "run"), stdin=follower, stdout=follower, stderr=follower, env={**os.environ, **SLOW}
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    assert proc.wait(120) == 0, b"".join(chunks).decode(errors="replace")
    return b"".join(chunks).decode(errors="replace")


def test_bar_on_a_terminal_plain_lines_on_a_pipe(lab: Lab) -> None:
    fill(lab.data, small=20, large=3, large_size=4 << 20, sparse=1 << 20)
    shown = _on_a_terminal(lab)
    redraws = [part for part in shown.split("\r") if part.startswith("[")]
    assert len(redraws) >= 2, shown  # the bar is redrawn in place
    assert redraws[-1].startswith("[" + "#" * 30 + "] rstudio/home -> offsite: 100%"), redraws[-1]
    assert "success" in shown

    (lab.data / "plainlarge-0.bin").write_bytes(os.urandom(6 << 20))  # something to upload again
    piped = subprocess.run(
        cli_argv(lab, "run"), capture_output=True, text=True, env={**os.environ, **SLOW}, timeout=120, check=False
    )
    assert piped.returncode == 0, piped.stderr
    assert "\r" not in piped.stdout + piped.stderr and "[#" not in piped.stderr
    lines = [line for line in piped.stderr.splitlines() if line.startswith("rstudio/home -> offsite:")]
    assert lines and lines[-1].startswith("rstudio/home -> offsite: 100%"), piped.stderr


def _times(log: Path) -> list[datetime]:
    return [datetime.fromisoformat(json.loads(line)["time"]) for line in log.read_text().splitlines() if line]


def test_every_written_object_is_checked_by_hash_as_crypt_uploads_it(lab: Lab) -> None:
    """rclone's own words, per object, in the sync's DEBUG log: no cryptcheck needs to read it all again."""
    fill(lab.data, small=20, large=2, large_size=1 << 20, sparse=1 << 20)
    ctx = context(lab.loaded, state_dir=lab.state)
    (entry,) = run_backup(ctx).record.datasets
    assert entry.checked_files == entry.transferred_files == entry.files
    logs = lab.state / "private" / "logs"
    (sync,) = logs.glob("*-sync.log")
    result = rclone_log.parse_log(sync, 0)
    assert sorted(result.verified) == sorted(result.copied) and len(result.copied) == entry.files
    assert not list(logs.glob("*-check-*.log"))


def test_written_objects_are_checked_while_the_sync_runs(lab: Lab, monkeypatch: pytest.MonkeyPatch) -> None:
    """A remote that gives no hash as crypt uploads (here: its lines not read) gets a cryptcheck instead."""
    fill(lab.data, small=20, large=4, large_size=3 << 20, sparse=1 << 20)
    for name, value in SLOW.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(rclone_log, "_verified", lambda entry: None)
    monkeypatch.setattr(check, "CHECK_BATCH_WAIT", 1.0)  # a batch a second: several within this ~3 s run
    ctx = context(lab.loaded, state_dir=lab.state)
    (entry,) = run_backup(ctx).record.datasets
    assert entry.checked_files == entry.transferred_files == entry.files
    logs = lab.state / "private" / "logs"
    (sync,) = logs.glob("*-sync.log")
    batches = sorted(logs.glob("*-check-*.log"))
    assert len(batches) >= 2, batches
    assert min(_times(batches[0])) < max(_times(sync)), "the first check batch began before the sync ended"
