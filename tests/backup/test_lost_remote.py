"""A remote lost mid-run. Two ways: the sftp server frozen with SIGSTOP (connections stay open, no byte comes
back: the worst case), and the server killed (connections reset, then refused). Either way the run ends
within its stall limit with a clear error, records the run as failed, releases the lock and its dataset
markers. Then a new server comes up on the same folder and host keys (a new port) and the next run resumes
and completes: a restore equals the snapshot. The frozen server is killed, not resumed, before that: a
resumed one can still finish the frozen session's half-done renames while the next run works, which made an
earlier version of this test flaky; a killed one cannot."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from homelab.backup import BackupError, context, restore, run_backup
from homelab.backup.lock import running_datasets
from homelab.backup.snapshots import open_snapshot
from homelab.config.loader import load
from tests.backup.conftest import KEY, Lab, fill, tree
from tests.backup.test_served_remotes import Server, _lab, _serve, served_config

pytestmark = [pytest.mark.real, pytest.mark.timeout(400)]

STALL = 15  # backup.stall_timeout, seconds (small, for the test; rclone's own timeouts are half of it)
BOUND = 6 * STALL + 60  # the stall limit, rclone's own retries, the checks still running: never hours


def _uploaded(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def _run_and_lose_the_server(ctx, server: Server, lose: Callable[[], None]) -> tuple[BackupError, float]:
    """Run a backup; once 2 MiB have reached the server, `lose` it. The error and how long the run took."""
    lost = threading.Event()

    def when_uploading() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and _uploaded(server.root) < 2 << 20:
            time.sleep(0.05)
        lose()
        lost.set()

    watcher = threading.Thread(target=when_uploading, daemon=True)
    watcher.start()
    started = time.monotonic()
    try:
        with pytest.raises(BackupError) as failed:
            run_backup(ctx)
        took = time.monotonic() - started
    finally:
        watcher.join()
    assert lost.is_set()
    assert took < BOUND, took
    last = ctx.state.runs()[-1]
    assert last.result == "failed" and not ctx.state.running_path.exists(), last
    assert running_datasets(ctx.state.root) == set()
    with ctx.state.lock():  # released
        pass
    return failed.value, took


def test_a_frozen_sftp_server_ends_the_run_in_bounded_time(make_pool, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("RCLONE_BWLIMIT", "2M")  # ~6 s of upload: time to freeze the server mid-transfer
    with _serve("sftp", tmp_path / "server") as server:
        lab = _lab(make_pool, tmp_path, server, backup={"stall_timeout": STALL})
        fill(lab.data, small=20, large=6, large_size=2 << 20, sparse=1 << 16)
        ctx = context(lab.loaded, state_dir=lab.state)
        try:
            error, _ = _run_and_lose_the_server(ctx, server, lambda: os.kill(server.pid, signal.SIGSTOP))
        finally:
            os.kill(server.pid, signal.SIGKILL)  # never resumed: see above
    assert "the remote stopped answering" in str(error) or "timeout" in str(error), error
    monkeypatch.delenv("RCLONE_BWLIMIT")
    _next_run_resumes(lab, tmp_path)


def test_a_killed_sftp_server_ends_the_run_in_bounded_time_and_the_next_run_resumes(
    make_pool, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setenv("RCLONE_BWLIMIT", "2M")
    with _serve("sftp", tmp_path / "server") as server:
        lab = _lab(make_pool, tmp_path, server, backup={"stall_timeout": STALL})
        fill(lab.data, small=20, large=6, large_size=2 << 20, sparse=1 << 16)
        ctx = context(lab.loaded, state_dir=lab.state)
        error, _ = _run_and_lose_the_server(ctx, server, lambda: os.kill(server.pid, signal.SIGKILL))
    message = str(error)
    assert message.startswith(f"backup failed: {KEY} -> sftp: "), message
    assert "partial:" not in message  # the remote is gone: no listing could be written, none is claimed
    monkeypatch.delenv("RCLONE_BWLIMIT")
    _next_run_resumes(lab, tmp_path)


def _next_run_resumes(lab: Lab, tmp_path: Path) -> None:
    with _serve("sftp", tmp_path / "server") as again:  # back, on a new port
        loaded = load(served_config(tmp_path, lab.dataset.split("/")[0], again, {"stall_timeout": STALL}))
        ctx = context(loaded, state_dir=lab.state)
        record = run_backup(ctx).record
        assert record.result == "success", record
        assert not [p for p in again.root.rglob("*") if p.name.endswith(".partial")]
        with open_snapshot(lab.dataset, record.snapshot, tmp_path / "mnt") as snap:
            expected = tree(snap)
        restore(ctx, KEY, tmp_path / "restored")
        assert tree(tmp_path / "restored") == expected
