"""verify, restore, drill, prune, snapshot and status against the fakes."""

from __future__ import annotations

import os
import random
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from homelab.backup import BackupError, drill, prune, restore, run_backup, status, take_snapshots, verify
from homelab.backup.records import Run, Running
from homelab.backup.retention import snapshot_name
from homelab.runtime.rclone import Result
from tests.backup.conftest import KEY, attributes, fill, tree
from tests.backup.fast import START, FastLab, make_fast_lab


@pytest.fixture
def lab(tmp_path: Path) -> FastLab:
    lab = make_fast_lab(tmp_path)
    fill(lab.data, small=40, large=1, large_size=8192, sparse=1 << 16)
    return lab


def _snapshot_dir(lab: FastLab, record: Run) -> Path:
    return lab.zfs.snapshot_dir(lab.dataset, record.snapshot)


def test_verify_names_each_damaged_missing_and_extra_object(lab: FastLab) -> None:
    ctx = lab.ctx()
    run_backup(ctx)
    assert verify(ctx).result == "success"
    (lab.current / "plaincanary.txt").write_bytes(b"flipped")
    (lab.current / "plainempty.txt").unlink()
    (lab.current / "stray.bin").write_bytes(b"?")
    with pytest.raises(BackupError) as failed:
        verify(ctx)
    assert str(failed.value).splitlines()[1:] == [
        "  rstudio/home -> offsite: differs: plaincanary.txt",
        "  rstudio/home -> offsite: missing on the remote: plainempty.txt",
        "  rstudio/home -> offsite: not in the snapshot: stray.bin",
    ]
    assert ctx.state.verifies()[-1].result == "failed"


def test_verify_without_a_backup_fails(lab: FastLab) -> None:
    with pytest.raises(BackupError, match=r"rstudio/home -> offsite: no successful backup yet"):
        verify(lab.ctx())


def test_restore_latest_brings_back_content_and_metadata(lab: FastLab, tmp_path: Path) -> None:
    ctx = lab.ctx()
    record = run_backup(ctx).record
    snap = _snapshot_dir(lab, record)
    result = restore(ctx, KEY, tmp_path / "restored")
    assert tree(tmp_path / "restored") == tree(snap)
    assert attributes(tmp_path / "restored") == attributes(snap)
    assert (result.as_of, result.owners_restored) == (record.id, os.geteuid() == 0)
    with pytest.raises(BackupError, match=r"is not empty"):
        restore(ctx, KEY, tmp_path / "restored")
    part = restore(ctx, KEY, tmp_path / "part", subpath="plaindir-02")
    assert {p.split("/")[0] for p in tree(tmp_path / "part")} == {"plaindir-02"} and part.files > 0


def test_restore_fails_naming_a_file_that_did_not_come_back(lab: FastLab, tmp_path: Path) -> None:
    ctx = lab.ctx()
    run_backup(ctx)
    (lab.current / "plaincanary.txt").unlink()  # lost on the remote after the run
    with pytest.raises(BackupError, match=r"restore of rstudio/home is incomplete: plaincanary.txt: not restored"):
        restore(ctx, KEY, tmp_path / "restored")


def test_restore_at_a_date_from_the_archives_on_a_new_machine(lab: FastLab, tmp_path: Path) -> None:
    ctx = lab.ctx()
    first = run_backup(ctx).record
    before = tree(_snapshot_dir(lab, first))
    (lab.data / "plaincanary.txt").write_text("changed\n")
    (lab.data / "plainnew\nline.txt").write_text("new in run 2\n")
    lab.clock.advance(days=1)
    run_backup(ctx)
    lab.clock.advance(days=1)
    (lab.data / "plainnew\nline.txt").write_text("changed in run 3\n")
    run_backup(ctx)

    fresh = lab.ctx(state_dir=tmp_path / "fresh-state")  # nothing local: listings come from the remote
    old = restore(fresh, KEY, tmp_path / "old", at=START + timedelta(hours=9))
    assert old.as_of == first.id and tree(tmp_path / "old") == before
    second = tmp_path / "second"
    restore(fresh, KEY, second, at=START + timedelta(days=1, hours=9))
    assert (second / "plainnew\nline.txt").read_text() == "new in run 2\n"  # from run 3's archive
    assert (second / "plaincanary.txt").read_text() == "changed\n"
    with pytest.raises(BackupError, match=r"no backup of rstudio/home on offsite at or before 2025-02-01"):
        restore(fresh, KEY, tmp_path / "too-early", at=datetime(2025, 2, 1, tzinfo=UTC))


def test_restore_without_any_listing_says_so(lab: FastLab, tmp_path: Path) -> None:
    lab.current.mkdir(parents=True)
    with pytest.raises(BackupError, match=r"no file listing of rstudio/home on offsite \(meta/rstudio/home/\)"):
        restore(lab.ctx(), KEY, tmp_path / "restored")


def test_a_failed_copy_fails_the_restore(lab: FastLab, tmp_path: Path) -> None:
    ctx = lab.ctx()
    run_backup(ctx)
    lab.rclone.fail["copy"] = Result(False, 1, errors=["connection reset"])
    with pytest.raises(
        BackupError, match=r"restore of rstudio/home as of \d{8}T\d{6}Z failed: copy failed: connection reset"
    ):
        restore(ctx, KEY, tmp_path / "restored")
    lab.rclone.fail["copy"] = Result(False, 1, errors=["connection reset"])
    with pytest.raises(BackupError, match=r"as of .* failed: copy failed: connection reset"):
        restore(ctx, KEY, tmp_path / "restored-at", at=lab.clock.now)


def test_drill_sample_then_full_when_due_and_a_damaged_file_fails_it(lab: FastLab) -> None:
    ctx = lab.ctx()
    run_backup(ctx)
    first = drill(ctx, sample=5, seed=1)
    assert first.full and first.result == "success"  # no full drill yet: this one is
    lab.clock.advance(days=1)
    sample = drill(ctx, sample=5, seed=1)
    assert not sample.full and sample.files == 5
    lab.clock.advance(days=30)
    (lab.current / "plaincanary.txt").write_bytes(b"flipped")
    with pytest.raises(BackupError, match=r"plaincanary.txt: restored content differs from snapshot"):
        drill(ctx)
    assert ctx.state.drills()[-1].full and ctx.state.drills()[-1].result == "failed"
    lab.rclone.fail["copy"] = Result(False, 1, errors=["gone"])
    with pytest.raises(
        BackupError,
        match=r"rstudio/home -> offsite: restore of rstudio/home as of \d{8}T\d{6}Z failed: copy failed: gone",
    ):
        drill(ctx, full=False)


def test_a_sampled_second_hardlink_name_is_drilled_with_its_first(lab: FastLab) -> None:
    """A one-entry sample that is the hardlink's second name restores and compares clean."""
    ctx = lab.ctx()
    run_backup(ctx)
    objects = [e for e in ctx.state.manifest(ctx.state.runs()[-1].datasets[0].manifest) if e.kind != "d"]
    # the seed whose one-entry sample (drill samples the same list with random.Random(seed)) is that name
    seed = next(s for s in range(10_000) if random.Random(s).sample(objects, 1)[0].link)  # noqa: S311
    assert drill(ctx, sample=1, seed=seed, full=False).result == "success"


def test_drill_without_a_backup_fails(lab: FastLab) -> None:
    with pytest.raises(BackupError, match=r"no successful backup to drill"):
        drill(lab.ctx())


def test_prune_keeps_the_running_and_the_last_good_snapshot(lab: FastLab) -> None:
    ctx = lab.ctx()
    run_backup(ctx)  # the last good one: START
    for days in range(1, 10):
        lab.clock.now = START + timedelta(days=days)
        lab.zfs.snapshot(lab.dataset, snapshot_name(lab.clock.now))
    running = snapshot_name(START + timedelta(days=3))
    ctx.state.mark_running(Running(pid=os.getpid(), run="x", snapshots={lab.dataset: running}))
    lab.zfs.busy.add(f"{lab.dataset}@{snapshot_name(START + timedelta(days=2))}")
    ctx.loaded.config.backup.retention.__dict__.update(hourly=0, daily=3, monthly=0)
    doomed = prune(ctx, ctx.datasets[0], dry_run=True)
    assert doomed == [snapshot_name(START + timedelta(days=d)) for d in (1, 2, 4, 5, 6)]
    assert len(lab.zfs.snapshots(lab.dataset)) == 10  # a dry run: nothing gone
    pruned = prune(ctx, ctx.datasets[0])
    assert pruned == [snapshot_name(START + timedelta(days=d)) for d in (1, 4, 5, 6)]  # day 2 is busy
    left = set(lab.zfs.snapshots(lab.dataset))
    assert {snapshot_name(START), running, snapshot_name(START + timedelta(days=2))} <= left


def test_take_snapshots_once_per_hour(lab: FastLab) -> None:
    ctx = lab.ctx()
    assert take_snapshots(ctx) == [f"{lab.dataset}@{snapshot_name(START)}"]
    assert take_snapshots(ctx) == []


def test_status_shows_an_interrupted_run_and_failed_checks(lab: FastLab) -> None:
    ctx = lab.ctx()
    empty = status(ctx)
    assert not empty.healthy and empty.problems == ["no backup has run yet"]
    good = run_backup(ctx).record
    lab.clock.advance(hours=2)
    info = status(ctx)
    assert info.healthy and info.last_success == good.id and info.last_success_age_hours == 2.0
    dead = subprocess.Popen(["true"])
    dead.wait()
    ghost = Run(id="20250301T040000Z", start=lab.clock.now, snapshot="s", remotes=["offsite"], pid=dead.pid)
    ctx.state.save_run(ghost)
    ctx.state.mark_running(Running(pid=dead.pid, run=ghost.id))
    info = status(ctx)
    assert info.last_run_state == "interrupted" and info.running is None
    assert info.problems == ["the last run 20250301T040000Z interrupted"]
    ctx.state.mark_running(Running(pid=os.getpid(), run=ghost.id))
    assert status(ctx).last_run_state == "running" and status(ctx).healthy
    ctx.state.clear_running()
    ctx.state.save_run(good)  # (the interrupted one stays the newest by id; make a good run the newest)
    (lab.state / "runs" / f"{ghost.id}.json").unlink()
    (lab.current / "plaincanary.txt").write_bytes(b"flipped")
    with pytest.raises(BackupError):
        verify(ctx)
    with pytest.raises(BackupError):
        drill(ctx, full=True)
    info = status(ctx)
    assert [p.split(" (")[0] for p in info.problems] == ["the last verify", "the last drill"]
    assert info.last_good_drill is None and info.last_drill is not None
