"""A run that dies midway (its sync killed; or the remote gone too): what status, restore and drill say after
it must be true. `current/` then holds some objects of the new snapshot and the old versions of the rest; the
objects the dead run replaced sit in its archive."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from homelab.backup import BackupError, drill, restore, run_backup, status
from homelab.runtime.rclone import Result
from tests.backup.conftest import KEY, attributes, fill, tree
from tests.backup.fast import FastLab, make_fast_lab

# in the order the sync writes them; plaincanary.txt has a second name, plainhardlink.txt
CHANGED = ["plaincanary.txt", "plaindir-00/plainsub-0/plainfile-00000.txt", "plainlarge-0.bin"]


@pytest.fixture
def lab(tmp_path: Path) -> FastLab:
    lab = make_fast_lab(tmp_path)
    fill(lab.data, small=6, large=1, large_size=8192, sparse=1 << 14)
    return lab


def _change(lab: FastLab) -> None:
    for n, name in enumerate(CHANGED):
        (lab.data / name).write_text(f"changed {n}, a different size\n")
    (lab.data / "plainnew.txt").write_text("new in the second run\n")


def test_a_run_killed_midway_leaves_a_partial_listing_and_the_last_complete_restore_exact(
    lab: FastLab, tmp_path: Path
) -> None:
    ctx = lab.ctx()
    first = run_backup(ctx).record
    before, before_attributes = tree(lab.data), attributes(lab.data)
    lab.clock.advance(hours=1)
    _change(lab)
    after = tree(lab.data)
    lab.rclone.stop_sync_after = 2  # the first two changed files reach the remote, then the sync dies
    with pytest.raises(
        BackupError, match=r"rclone sync was killed \(signal 9\) \(partial: \d+ of \d+ files of this snapshot are on"
    ):
        run_backup(ctx)
    second = ctx.state.runs()[-1]
    (entry,) = second.datasets
    assert (second.result, entry.partial_files, entry.tree) == (
        "failed",
        entry.files - 3,  # every file but the changed ones that never made it
        f"meta/{KEY}/{second.id}.partial.json.gz",
    )
    info = status(ctx)
    assert info.last_run_state == "failed" and "partial:" in info.problems[0] and not info.healthy

    # the latest restore is the last complete run, exactly: what the dead run replaced comes from its archive
    latest = restore(ctx, KEY, tmp_path / "latest")
    assert latest.as_of == first.id and latest.missing == []
    assert tree(tmp_path / "latest") == before and attributes(tmp_path / "latest") == before_attributes
    assert drill(ctx, full=True).result == "success"  # reads the same places

    # the dead run as of its own time: what it uploaded, with its metadata, and it says what never arrived
    fresh = lab.ctx(state_dir=tmp_path / "fresh-state")
    partial = restore(fresh, KEY, tmp_path / "partial", at=lab.clock.now)
    assert partial.as_of == second.id
    assert sorted(partial.missing) == ["plainhardlink.txt", "plainlarge-0.bin", "plainnew.txt"]  # after 2 of 5
    got = tree(tmp_path / "partial")
    assert got == {k: v for k, v in after.items() if k not in partial.missing}
    assert got["plaincanary.txt"] == after["plaincanary.txt"] != before["plaincanary.txt"]

    # the listing says nothing it does not hold
    meta = lab.rclone.folder(f"hl-offsite-crypt:meta/{KEY}/{second.id}.partial.json.gz")
    listed = json.loads(gzip.decompress(meta.read_bytes()))
    assert {row[0] for row in listed["entries"]} & set(listed["missing"]) == set()

    # the next run finishes the job
    lab.clock.advance(hours=1)
    third = run_backup(ctx).record
    done = restore(ctx, KEY, tmp_path / "done")
    assert (done.as_of, done.missing, third.result) == (third.id, [], "success")
    assert tree(tmp_path / "done") == after


def test_a_run_whose_remote_went_away_leaves_no_listing_and_restore_stays_exact(lab: FastLab, tmp_path: Path) -> None:
    ctx = lab.ctx()
    first = run_backup(ctx).record
    before = tree(lab.data)
    lab.clock.advance(hours=1)
    _change(lab)
    lab.rclone.stop_sync_after = 1
    lab.rclone.fail["list_objects"] = Result(False, 1, errors=["connection refused"])
    with pytest.raises(BackupError, match=r"rclone sync was killed \(signal 9\)$"):
        run_backup(ctx)
    (entry,) = ctx.state.runs()[-1].datasets
    assert entry.tree is None and entry.partial_files is None
    assert not list(lab.rclone.folder(f"hl-offsite-crypt:meta/{KEY}").glob("*.partial.*"))
    fresh = lab.ctx(state_dir=tmp_path / "fresh-state")  # a new machine: the newest listing is the complete one
    assert restore(fresh, KEY, tmp_path / "latest").as_of == first.id
    assert tree(tmp_path / "latest") == before


def test_a_first_run_that_dies_restores_what_it_uploaded_and_says_it_is_partial(lab: FastLab, tmp_path: Path) -> None:
    ctx = lab.ctx()
    lab.rclone.stop_sync_after = 5
    with pytest.raises(BackupError, match=r"partial: 5 of \d+ files of this snapshot are on the remote"):
        run_backup(ctx)
    got = restore(ctx, KEY, tmp_path / "got")  # no complete run: the partial one, and it says so
    assert got.files == 5 and len(got.missing) == ctx.state.runs()[-1].datasets[0].files - 5
