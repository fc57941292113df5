"""`homelab backup status` and `schedule` through the CLI, without zfs or rclone (a stand-in program
answers `rclone obscure`; the records are written by the library against the fakes)."""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from homelab.backup import BackupError, run_backup, verify
from homelab.backup.records import Run, Running
from homelab.backup.schedule import install, units
from homelab.cli.backup import backup_app
from tests.backup.conftest import fill
from tests.backup.fast import FastLab, make_fast_lab
from tests.fakes.systemd import FakeSystemd

STANDIN = Path(__file__).with_name("standin_rclone.py")


@pytest.fixture
def lab(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FastLab:
    program = tmp_path / "rclone"
    program.write_text(f'#!/bin/sh\nexec {sys.executable} {STANDIN} "$@"\n')
    program.chmod(0o755)
    monkeypatch.setenv("HOMELAB_RCLONE", str(program))
    monkeypatch.setenv("STANDIN_RECORD", str(tmp_path / "calls.jsonl"))
    lab = make_fast_lab(tmp_path)
    fill(lab.data, small=5, large=0, sparse=1 << 12)
    return lab


def _status(lab: FastLab, *extra: str):
    args = ["status", "--config", str(lab.config), "--state-dir", str(lab.state), *extra]
    return CliRunner().invoke(backup_app, args)


def test_status_before_any_run_exits_1(lab: FastLab) -> None:
    result = _status(lab)
    assert result.exit_code == 1 and result.output.splitlines()[-1] == "no backup has run yet"


def test_status_after_a_kill_9_says_interrupted_and_exits_1(lab: FastLab) -> None:
    ctx = lab.ctx()
    run_backup(ctx)
    dead = subprocess.Popen(["true"])
    dead.wait()
    lab.clock.advance(hours=1)
    ctx.state.save_run(Run(id="20250301T040000Z", start=lab.clock.now, snapshot="s", remotes=["offsite"], pid=dead.pid))
    ctx.state.mark_running(Running(pid=dead.pid, run="20250301T040000Z"))
    result = _status(lab)
    assert result.exit_code == 1, result.output
    assert result.output.splitlines()[0] == "last run:     20250301T040000Z interrupted, 0 files, 0 bytes, unfinished"
    assert "problem:      the last run 20250301T040000Z interrupted" in result.output


def test_status_exits_1_when_the_last_verify_failed_and_json_says_why(lab: FastLab) -> None:
    ctx = lab.ctx()
    run_backup(ctx)
    healthy = _status(lab)
    assert healthy.exit_code == 0, healthy.output
    assert "last verify:  never" in healthy.output and "last drill:   never" in healthy.output
    (lab.current / "plaincanary.txt").write_bytes(b"flipped")
    with pytest.raises(BackupError):
        verify(ctx)
    result = _status(lab)
    assert result.exit_code == 1 and "last verify:  2025-03-01T03:00:00+00:00 failed, " in result.output
    data = json.loads(_status(lab, "--json").output)
    assert data["schema_version"] == 1 and data["last_verify"]["result"] == "failed"
    assert data["problems"] == [
        "the last verify (20250301T030000Z) failed: rstudio/home -> offsite: differs: plaincanary.txt"
    ]


def test_schedule_units_have_start_timeouts_and_install_enables_the_timers(lab: FastLab, tmp_path: Path) -> None:
    written = units(lab.loaded)
    assert "TimeoutStartSec=12h" in written["homelab-backup.service"]
    assert "TimeoutStartSec=6h" in written["homelab-backup-drill.service"]
    systemd = FakeSystemd()
    paths = install(lab.loaded, tmp_path / "units", systemd=systemd)
    assert sorted(p.name for p in paths) == sorted(written)
    assert systemd.calls == [
        ("daemon-reload",),
        (
            "enable",
            "--now",
            "homelab-backup.timer",
            "homelab-backup-drill.timer",
            "homelab-backup-recovery-drill.timer",
        ),
    ]
    install(lab.loaded, tmp_path / "units", enable=False)  # ours: rewritten
    (tmp_path / "units" / "homelab-backup.timer").write_text("[Timer]\n# someone else's\n")
    with pytest.raises(Exception, match=r"homelab-backup.timer was not written by homelab; remove it first"):
        install(lab.loaded, tmp_path / "units", enable=False)


@pytest.fixture
def wired(lab: FastLab, monkeypatch: pytest.MonkeyPatch) -> FastLab:
    """The CLI builds its own context: hand it the lab's fakes instead of the real drivers."""
    from homelab.backup.snapshots import Snapshots

    module = importlib.import_module("homelab.backup.context")  # the module, not the function of that name

    monkeypatch.setattr(module, "Rclone", lambda *args, **kwargs: lab.rclone)
    monkeypatch.setattr(module, "Snapshots", lambda: Snapshots(lab.zfs))
    return lab


def _cli(lab: FastLab, *args: str):
    common = ["--config", str(lab.config), "--state-dir", str(lab.state)]
    return CliRunner().invoke(backup_app, [*args, *common])


def test_every_verb_through_the_cli(wired: FastLab, tmp_path: Path) -> None:
    result = _cli(wired, "snapshot")
    assert result.exit_code == 0 and "snapshot tank/homelab/rstudio/home@homelab-" in result.output, result.output
    result = _cli(wired, "run")  # within the same second as that snapshot, as likely as not
    assert result.exit_code == 0 and "backup " in result.output and ": success, " in result.output, result.output
    assert "success rstudio/home -> offsite: " in result.output
    result = _cli(wired, "verify")
    assert result.exit_code == 0 and "verified: " in result.output, result.output
    result = _cli(wired, "drill", "--sample-only", "--sample", "3")
    # 3 sampled, plus the first name of the hardlink when its second name is one of them
    assert result.exit_code == 0 and re.search(r"drill ok: [34] files restored and identical \(sample\)", result.output)
    target = tmp_path / "restored"
    result = _cli(wired, "restore", "rstudio/home", "--to", str(target), "--at", "2999-01-01")
    assert result.exit_code == 0 and f"into {target}" in result.output, result.output
    assert (target / "plaincanary.txt").exists()
    result = _cli(wired, "prune", "--dry-run")
    assert result.exit_code == 0, result.output


def test_a_failing_verb_exits_1_with_one_error_line(wired: FastLab, tmp_path: Path) -> None:
    result = _cli(wired, "verify")
    assert result.exit_code == 1 and "error: verify failed:" in result.output
    result = _cli(wired, "restore", "rstudio/home", "--to", str(tmp_path / "r"))
    assert result.exit_code == 1 and "error: no file listing of rstudio/home" in result.output, result.output
    result = _cli(wired, "run", "--dataset", "nope/x")
    assert result.exit_code == 2 and "not a backed-up dataset: nope/x" in result.output
