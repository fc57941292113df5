"""bench/backup_phases.py against the fakes: every phase of a run is timed, the ones off the run's own thread
(the manifest written while the sync uploads, the listing uploaded while the clone is destroyed) apart, and
nothing stays patched after."""

from __future__ import annotations

from pathlib import Path

from bench.backup_phases import BESIDE, ORDER, profile_run
from homelab.backup import listing, names, run, run_backup, tree
from tests.backup.conftest import fill
from tests.backup.fast import make_fast_lab


def test_each_phase_of_a_run_is_timed_and_nothing_stays_patched(tmp_path: Path) -> None:
    lab = make_fast_lab(tmp_path)
    fill(lab.data, small=20, large=1, large_size=4096, sparse=1 << 16)
    ctx = lab.ctx()
    before = (tree.scan, names.assign, listing.upload, run.prune, dict(vars(ctx.rclone)), dict(vars(ctx.state)))
    wall, report, split = profile_run(ctx, lambda: run_backup(ctx))
    assert report.record.result == "success"
    on_thread = {"snapshot", "mount", "scan", "names", "sync", "check", "records", "prune", "unmount", "rest"}
    assert on_thread <= set(split) and set(split) - {BESIDE + p for p in ORDER} <= set(ORDER)
    assert {BESIDE + "manifest", BESIDE + "listing"} <= set(split)  # beside the sync and the clone's destruction
    assert abs(sum(v for k, v in split.items() if not k.startswith(BESIDE)) - wall) < 1e-6
    after = (tree.scan, names.assign, listing.upload, run.prune, dict(vars(ctx.rclone)), dict(vars(ctx.state)))
    assert after == before
