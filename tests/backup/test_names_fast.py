"""Names against the fakes (tests/fakes/rclone.py): what the remote cannot hold is stored under a derived
name and comes back exactly through restore, restore --at, a full drill and verify; the derived objects
follow a file's changes of name between runs (the real rclone: test_names_real.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from homelab.backup import BackupError, drill, names, restore, run_backup, verify
from homelab.runtime.rclone import Result
from tests.backup import hostile_names as hostile
from tests.backup.conftest import KEY, attributes, tree
from tests.backup.fast import FastLab, make_fast_lab


@pytest.fixture
def lab(tmp_path: Path) -> FastLab:
    return make_fast_lab(tmp_path)


def _derived_objects(lab: FastLab) -> set[str]:
    folder = lab.current / names.FOLDER
    return {p.name for p in folder.iterdir()} if folder.is_dir() else set()


def test_every_hostile_name_comes_back_exactly(lab: FastLab, tmp_path: Path) -> None:
    hostile.make(lab.data, deep_total=3900 - len(str(tmp_path)))
    ctx = lab.ctx()
    expected, expected_attributes = tree(lab.data), attributes(lab.data)
    record = run_backup(ctx).record
    (entry,) = record.datasets
    assert entry.derived_files == 14 and entry.files == len(expected)
    assert entry.transferred_files == entry.checked_files == len(expected) - 1  # the long symlink: listing only
    stored = {str(p.relative_to(lab.current)) for p in lab.current.rglob("*") if p.is_file()}
    assert hostile.FITS in stored and hostile.NEWLINE.replace("\n", "\u240a") in stored
    for name in (hostile.LONGEST, hostile.COMPOSED, hostile.DECOMPOSED, hostile.NOT_UTF8, hostile.QUOTED):
        assert name not in stored and names.object_name(name) in stored

    for target, options in [("latest", {}), ("at", {"at": record.start}), ("part", {"subpath": "F" * 200})]:
        restore(ctx, KEY, tmp_path / target, **options)  # type: ignore[arg-type]
    assert tree(tmp_path / "latest") == expected and attributes(tmp_path / "latest") == expected_attributes
    assert tree(tmp_path / "at") == expected
    assert tree(tmp_path / "part") == {k: v for k, v in expected.items() if k.startswith("F" * 200 + "/")}
    assert (tmp_path / "latest" / ("H" * 250 + ".hard")).samefile(tmp_path / "latest" / hostile.LONGEST)
    assert (tmp_path / "latest" / ("E" * 255)).is_dir()
    assert drill(ctx, full=True).result == "success"
    assert verify(ctx).result == "success"


def test_a_damaged_derived_object_is_named_by_verify_and_repaired_by_the_next_run(lab: FastLab) -> None:
    (lab.data / hostile.LONGEST).write_text("long\n")
    ctx = lab.ctx()
    run_backup(ctx)
    stored = lab.current / names.object_name(hostile.LONGEST)
    stored.write_text("LONG\n")
    with pytest.raises(Exception, match=names.object_name(hostile.LONGEST)):
        verify(ctx)
    lab.clock.advance(hours=1)
    assert run_backup(ctx).record.datasets[0].transferred_files == 1
    assert stored.read_text() == "long\n" and verify(ctx).result == "success"


def test_derived_objects_follow_a_file_changing_names_between_runs(lab: FastLab, tmp_path: Path) -> None:
    (lab.data / "short.txt").write_text("first\n")
    (lab.data / hostile.COMPOSED).write_text("alone\n")
    ctx = lab.ctx()
    first = run_backup(ctx).record
    assert not _derived_objects(lab)

    lab.clock.advance(hours=1)  # a normal name becomes a long one; a twin appears
    (lab.data / "short.txt").rename(lab.data / hostile.LONGEST)
    (lab.data / hostile.DECOMPOSED).write_text("the twin\n")
    second = run_backup(ctx).record
    assert not (lab.current / "short.txt").exists() and not (lab.current / hostile.COMPOSED).exists()
    assert _derived_objects(lab) == {
        names.object_name(p).rpartition("/")[2] for p in (hostile.LONGEST, hostile.COMPOSED, hostile.DECOMPOSED)
    }
    archive = lab.rclone.root / "offsite" / "archive" / second.id / KEY
    assert (archive / "short.txt").read_text() == "first\n"  # kept for restore --at

    lab.clock.advance(hours=1)  # and back: the derived objects go to the archive
    (lab.data / hostile.LONGEST).rename(lab.data / "short.txt")
    (lab.data / hostile.DECOMPOSED).unlink()
    third = run_backup(ctx).record
    assert not _derived_objects(lab) and third.datasets[0].derived_files == 0
    assert tree(lab.current) == tree(lab.data)

    for when, record in [(first, first), (second, second), (third, third)]:
        restored = tmp_path / f"at-{record.id}"
        assert restore(ctx, KEY, restored, at=when.start).as_of == record.id
    assert set(tree(tmp_path / f"at-{first.id}")) == {"short.txt", hostile.COMPOSED}
    assert tree(tmp_path / f"at-{second.id}") == {
        hostile.LONGEST: tree(tmp_path / f"at-{first.id}")["short.txt"],
        hostile.COMPOSED: tree(tmp_path / f"at-{first.id}")[hostile.COMPOSED],
        hostile.DECOMPOSED: _sha(b"the twin\n"),
    }
    assert drill(ctx, full=True).result == "success"


def _sha(data: bytes) -> str:
    return __import__("hashlib").sha256(data).hexdigest()


def test_the_limits_are_the_crypts() -> None:
    assert names.encrypted_length("n" * 143) == 231 and names.encrypted_length("o" * 144) == 256
    assert names.encrypted_length("c" * 141 + "\n") == 256  # a newline is 3 bytes as rclone spells it
    assert os.fsencode(hostile.NOT_UTF8) == b"not-utf8-\xff.txt"


def _lose_the_remote_in_the_derived_sync(lab: FastLab, monkeypatch: pytest.MonkeyPatch, *, crash: bool) -> None:
    """The next derived-name sync: the remote is lost as it starts (the sync fails having done nothing; the
    run's record says how many derived objects it meant to leave), or - `crash` - the sync writes its objects
    and the process dies (no record of the dataset at all)."""
    real = lab.rclone.sync

    def sync(source: Path, dst: str, **options: object) -> Result:
        if not dst.endswith("/" + names.FOLDER):
            return real(source, dst, **options)  # type: ignore[arg-type]
        monkeypatch.undo()
        if crash:
            real(source, dst, **options)  # type: ignore[arg-type]
            raise KeyboardInterrupt("killed in the derived-name sync")
        return Result(False, 1, timed_out=True, errors=["no answer from the remote for 300 s"])

    monkeypatch.setattr(lab.rclone, "sync", sync)


def _pointed_at(lab: FastLab) -> set[str]:
    last = lab.ctx().last_success(KEY, "offsite")
    assert last is not None
    entries = lab.ctx().state.manifest(last.entry.manifest)
    return {e.stored_as.rpartition("/")[2] for e in entries if e.has_object and e.stored_as}


def test_a_failed_derived_name_sync_leaves_no_stale_object_after_the_next_run(
    lab: FastLab, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The run after a long name went away fails in its derived-name sync (so it moves nothing to its
    archive) and records no derived object; the next successful run still empties `.homelab-names` into its
    archive: what is left there is what the listing points at, and every run restores exactly."""
    (lab.data / hostile.LONGEST).write_text("long\n")
    (lab.data / "short.txt").write_text("short\n")
    ctx = lab.ctx()
    first = run_backup(ctx).record
    old = names.object_name(hostile.LONGEST).rpartition("/")[2]
    assert _derived_objects(lab) == {old}

    lab.clock.advance(hours=1)
    (lab.data / hostile.LONGEST).rename(lab.data / "was-long.txt")
    _lose_the_remote_in_the_derived_sync(lab, monkeypatch, crash=False)
    with pytest.raises(BackupError, match="300 s"):
        run_backup(ctx)
    assert ctx.state.runs()[-1].datasets[0].derived_files == 0  # what the failed run meant to leave

    lab.clock.advance(hours=1)
    third = run_backup(ctx).record
    assert _derived_objects(lab) == _pointed_at(lab) == set()
    archived = lab.rclone.root / "offsite" / "archive" / third.id / KEY / names.FOLDER / old
    assert archived.read_text() == "long\n"  # moved, not deleted
    restore(ctx, KEY, tmp_path / "first", at=first.start)
    assert (tmp_path / "first" / hostile.LONGEST).read_text() == "long\n"
    assert verify(ctx).result == "success" and drill(ctx, full=True).result == "success"


def test_a_run_killed_in_its_derived_name_sync_leaves_no_stale_object_after_the_next_run(
    lab: FastLab, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed after its derived-name sync wrote an object: the run's record holds no entry at all, and the
    last successful run had no derived names; the next run still finds the object and archives it."""
    (lab.data / "short.txt").write_text("short\n")
    ctx = lab.ctx()
    run_backup(ctx)
    lab.clock.advance(hours=1)
    (lab.data / hostile.LONGEST).write_text("long\n")
    _lose_the_remote_in_the_derived_sync(lab, monkeypatch, crash=True)
    with pytest.raises(KeyboardInterrupt):
        run_backup(ctx)
    assert _derived_objects(lab) and not ctx.state.runs()[-1].datasets
    lab.clock.advance(hours=1)
    (lab.data / hostile.LONGEST).unlink()
    third = run_backup(ctx).record
    assert _derived_objects(lab) == _pointed_at(lab) == set()
    archive = lab.rclone.root / "offsite" / "archive" / third.id / KEY / names.FOLDER
    assert [p.read_text() for p in archive.iterdir()] == ["long\n"]
    assert verify(ctx).result == "success"


def test_verify_names_an_object_under_derived_names_that_no_listing_entry_points_at(lab: FastLab) -> None:
    """Left by hand (or by an older version): verify fails naming it; the next run moves it to its archive."""
    (lab.data / "short.txt").write_text("short\n")
    ctx = lab.ctx()
    run_backup(ctx)
    stray = lab.current / names.object_name("gone")
    stray.parent.mkdir()
    stray.write_text("stale\n")
    with pytest.raises(BackupError, match=f"not in the snapshot: {names.object_name('gone')}"):
        verify(ctx)
    lab.clock.advance(hours=1)
    later = run_backup(ctx).record
    assert not _derived_objects(lab)
    assert (lab.rclone.root / "offsite" / "archive" / later.id / KEY / names.object_name("gone")).exists()
    assert verify(ctx).result == "success"


def test_a_new_state_folder_still_archives_derived_objects_no_listing_points_at(lab: FastLab, tmp_path: Path) -> None:
    """No record at all (the pool holding the state folder lost): the remote is asked, and the first run
    archives the old derived objects rather than leaving them in `current/`."""
    (lab.data / hostile.LONGEST).write_text("long\n")
    first = run_backup(lab.ctx()).record
    (lab.data / hostile.LONGEST).unlink()
    (lab.data / "short.txt").write_text("short\n")
    lab.clock.advance(hours=1)
    ctx = lab.ctx(state_dir=tmp_path / "new-state")
    later = run_backup(ctx).record
    assert not _derived_objects(lab)
    assert (lab.rclone.root / "offsite" / "archive" / later.id / KEY / names.object_name(hostile.LONGEST)).exists()
    restore(ctx, KEY, tmp_path / "first", at=first.start)
    assert (tmp_path / "first" / hostile.LONGEST).read_text() == "long\n"
    assert verify(ctx).result == "success"
