"""Backup -> restore round trip on a real zfs-fuse pool and real rclone crypt; nothing plaintext remote."""

from __future__ import annotations

import json
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from homelab.backup import BackupError, context, drill, restore, run_backup, status
from homelab.backup.snapshots import open_snapshot
from homelab.cli.backup import backup_app
from tests.backup.conftest import CANARY, KEY, UNICODE_NAMES, assert_links_and_holes, attributes, fill, tree

pytestmark = pytest.mark.real


class Clock:
    def __init__(self, start: datetime):
        self.now = start

    def __call__(self) -> datetime:
        return self.now


def test_round_trip_manifest_equal_and_remote_opaque(lab, tmp_path: Path) -> None:
    fill(lab.data, small=10_000, large=2, large_size=3 << 20, sparse=16 << 20)
    ctx = context(lab.loaded, state_dir=lab.state)
    assert any("backup-crypt-password" in n for n in ctx.notes)  # generated, and the user is told
    report = run_backup(ctx)
    record = report.record
    assert record.result == "success"
    (entry,) = record.datasets
    assert entry.transferred_files == entry.checked_files == entry.files > 10_000

    with open_snapshot(lab.dataset, record.snapshot, tmp_path / "mnt") as snap:
        expected, expected_attributes = tree(snap), attributes(snap)
    restored = tmp_path / "restored"
    result = restore(ctx, KEY, restored)
    got = tree(restored)
    lost = set(expected) - set(got)
    mismatched = [k for k in expected if k in got and got[k] != expected[k]]
    assert (lost, mismatched, set(got) - set(expected)) == (set(), [], set())
    assert len(expected) > 10_000
    # owners, modes (setgid, sticky, 0600), mtimes of files, folders, symlinks and the root; empty folders
    assert result.owners_restored
    assert attributes(restored) == expected_attributes
    assert (restored / "plainempty-dir").is_dir()
    assert_links_and_holes(restored)

    # a new machine: no state folder, the listing comes from the remote (encrypted under meta/)
    fresh = context(lab.loaded, state_dir=tmp_path / "fresh-state")
    elsewhere = tmp_path / "elsewhere"
    restore(fresh, KEY, elsewhere, subpath="plaindir-01")
    want = {k: v for k, v in expected_attributes.items() if k.startswith("plaindir-01")}
    assert {k: v for k, v in attributes(elsewhere).items() if k != "."} == want

    # the remote holds no plaintext: not a name, not the canary
    blob_names = [str(p.relative_to(lab.remote)) for p in lab.remote.rglob("*")]
    for needle in ["plain", "canary", *UNICODE_NAMES, "日本語"]:
        assert not any(needle.lower() in n.lower() for n in blob_names), needle
    for path in lab.remote.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert CANARY not in data and b"secret notes" not in data and b"plainfile" not in data, path

    # the rclone config: 0600 in a 0700 folder, no plain secret in it
    conf = ctx.rclone.config_path
    assert stat.S_IMODE(conf.stat().st_mode) == 0o600
    assert stat.S_IMODE(conf.parent.stat().st_mode) == 0o700
    password = (lab.config.parent / "secrets/backup-crypt-password").read_text().strip()
    text = conf.read_text()
    assert password not in text and "filename_encryption = standard" in text

    # an incremental no-change run writes nothing; verify and drill pass; status and monitoring file
    again = run_backup(ctx).record
    assert again.datasets[0].transferred_files == 0
    assert drill(ctx, sample=10, full=False, seed=3).result == "success"
    info = status(ctx)
    assert info.last_success == again.id and info.last_drill is not None and info.last_drill.files == 10
    assert int((lab.state / "offsite.last_success").read_text()) > 0
    saved = json.loads((lab.state / "runs" / f"{again.id}.json").read_text())
    assert {"start", "end", "bytes", "files", "result"} <= set(saved)


def test_restore_at_date_and_subpath(lab, tmp_path: Path) -> None:
    fill(lab.data, small=60, large=0, sparse=1 << 20)
    clock = Clock(datetime(2025, 3, 1, 3, 0, tzinfo=UTC))
    ctx = context(lab.loaded, state_dir=lab.state, clock=clock)
    first = run_backup(ctx).record
    with open_snapshot(lab.dataset, first.snapshot, tmp_path / "mnt") as snap:
        before, before_attributes = tree(snap), attributes(snap)
    (lab.data / "plaincanary.txt").write_text("changed\n")
    (lab.data / "plaindir-01/plainsub-1/plainfile-00001.txt").unlink()
    (lab.data / "plainnew.txt").write_text("new in run 2\n")
    clock.now += timedelta(days=1)
    run_backup(ctx)
    clock.now += timedelta(days=1)
    (lab.data / "plainnew.txt").write_text("changed in run 3\n")
    run_backup(ctx)

    old = tmp_path / "old"
    result = restore(ctx, KEY, old, at=datetime(2025, 3, 1, 12, 0, tzinfo=UTC))
    assert result.as_of == first.id
    assert tree(old) == before
    latest = tmp_path / "latest"
    restore(ctx, KEY, latest)
    assert (latest / "plainnew.txt").read_text() == "changed in run 3\n"
    assert not (latest / "plaindir-01/plainsub-1/plainfile-00001.txt").exists()
    part = tmp_path / "part"
    restore(ctx, KEY, part, subpath="plaindir-02")
    assert {p.split("/")[0] for p in tree(part)} == {"plaindir-02"}
    with pytest.raises(Exception, match="not empty"):
        restore(ctx, KEY, part)

    # a new machine: no state folder, only the remote (and the crypt secrets)
    fresh = context(lab.loaded, state_dir=tmp_path / "fresh-state", clock=clock)
    again = tmp_path / "old-again"
    assert restore(fresh, KEY, again, at=datetime(2025, 3, 1, 12, 0, tzinfo=UTC)).as_of == first.id
    assert tree(again) == before
    assert attributes(again) == before_attributes
    second = tmp_path / "second"
    restore(fresh, KEY, second, at=datetime(2025, 3, 2, 12, 0, tzinfo=UTC))
    assert (second / "plainnew.txt").read_text() == "new in run 2\n"  # from run 3's archive
    assert (second / "plaincanary.txt").read_text() == "changed\n"
    assert not (second / "plaindir-01/plainsub-1/plainfile-00001.txt").exists()
    with pytest.raises(BackupError, match="no backup of rstudio/home on offsite at or before 2025-02"):
        restore(fresh, KEY, tmp_path / "too-early", at=datetime(2025, 2, 1, tzinfo=UTC))


def test_cli_run_status_verify(lab, tmp_path: Path) -> None:
    fill(lab.data, small=30, large=0, sparse=1 << 20)
    runner = CliRunner()
    args = ["--config", str(lab.config), "--state-dir", str(lab.state)]
    result = runner.invoke(backup_app, ["run", *args])
    assert result.exit_code == 0, result.output
    assert "backup " in result.output and "success" in result.output
    result = runner.invoke(backup_app, ["status", *args])
    assert result.exit_code == 0 and "last success:" in result.output, result.output
    assert "last verify:  never" in result.output
    result = runner.invoke(backup_app, ["verify", *args])
    assert result.exit_code == 0, result.output
    result = runner.invoke(backup_app, ["status", *args])
    assert "last verify:" in result.output and " success, " in result.output.split("last verify:")[1], result.output
    target = tmp_path / "r"
    result = runner.invoke(backup_app, ["restore", KEY, "--to", str(target), *args])
    assert result.exit_code == 0, result.output
    assert (target / "plaincanary.txt").read_bytes().endswith(CANARY + b"\n")
    password = (lab.config.parent / "secrets/backup-crypt-password").read_text().strip()
    assert password not in result.output
