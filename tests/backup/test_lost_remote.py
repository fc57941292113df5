"""A remote that stops answering mid-run (the sftp server frozen with SIGSTOP: connections stay open, no
byte comes back, the worst case): the run ends within its stall limit with a clear error, records the run
as failed and releases the lock. (A run right after the server is resumed can fail on the frozen session's
half-finished renames; that next run is not asserted here.)"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from homelab.backup import BackupError, context, run_backup
from tests.backup.conftest import fill
from tests.backup.test_served_remotes import _lab, _serve

pytestmark = [pytest.mark.real, pytest.mark.timeout(300)]

STALL = 15  # backup.stall_timeout, seconds (small, for the test; rclone's own timeouts are half of it)


def _uploaded(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def test_a_frozen_sftp_server_ends_the_run_in_bounded_time(make_pool, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("RCLONE_BWLIMIT", "2M")  # ~6 s of upload: time to freeze the server mid-transfer
    with _serve("sftp", tmp_path / "server") as server:
        lab = _lab(make_pool, tmp_path, server, backup={"stall_timeout": STALL})
        fill(lab.data, small=20, large=6, large_size=2 << 20, sparse=1 << 16)
        ctx = context(lab.loaded, state_dir=lab.state)
        frozen = threading.Event()

        def freeze_when_uploading() -> None:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and _uploaded(server.root) < 2 << 20:
                time.sleep(0.05)
            os.kill(server.pid, signal.SIGSTOP)
            frozen.set()

        watcher = threading.Thread(target=freeze_when_uploading, daemon=True)
        watcher.start()
        started = time.monotonic()
        try:
            with pytest.raises(BackupError) as failed:
                run_backup(ctx)
            took = time.monotonic() - started
        finally:
            watcher.join()
            os.kill(server.pid, signal.SIGCONT)
        assert frozen.is_set()
        assert "the remote stopped answering" in str(failed.value) or "timeout" in str(failed.value), failed.value
        assert took < 6 * STALL + 60, took  # bounded by the stall limit (and rclone's own retries), not hours
        last = ctx.state.runs()[-1]
        assert last.result == "failed" and not ctx.state.running_path.exists()
        with ctx.state.lock():  # released
            pass
