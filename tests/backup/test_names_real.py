"""Hostile names through real rclone crypt on a zfs-fuse dataset, to a local-dir remote and to `rclone serve
sftp` (a folder on ext4: 255-byte names): every name the filesystem allows comes back exactly through
restore, restore --at, a subpath restore, a full drill and verify - newline, tab, glob characters, leading
dash, 143-byte names under their own name; 144-255-byte names, a 255-byte name at the end of a ~4000-byte
path, NFC/NFD twins with different contents, names that are not UTF-8, U+201B, and a real file where the
derived names are kept, under derived names (homelab.backup.names). The 143/144-byte bound is the server's."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from homelab.backup import BackupError, context, drill, names, restore, run_backup, verify
from homelab.backup.snapshots import open_snapshot
from homelab.runtime.rclone import Result
from tests.backup import hostile_names as hostile
from tests.backup.conftest import KEY, Lab, attributes, make_lab, tree
from tests.backup.test_served_remotes import _lab, _serve

pytestmark = pytest.mark.real

HOSTILE = [
    "new\nline.txt",
    "tab\there.txt",
    "-starts-with-dash",
    " leading and trailing space ",
    "glob*chars?[x]{y}.txt",
    "back\\slash.txt",
    "n" * 143,  # the longest name whose encrypted form fits in 255 characters
    "é" * 71 + "x",  # 143 bytes in 72 characters
]


@pytest.fixture(params=["local", "sftp"])
def any_lab(request: pytest.FixtureRequest, make_pool, tmp_path: Path) -> Iterator[Lab]:
    """The lab with a local-dir remote, or with `rclone serve sftp` of a folder on ext4 as its remote."""
    if request.param == "local":
        yield make_lab(make_pool, tmp_path)
        return
    with _serve("sftp", tmp_path / "server") as server:
        yield _lab(make_pool, tmp_path, server)


def test_hostile_names_round_trip_exactly(any_lab: Lab, tmp_path: Path) -> None:
    lab = any_lab
    folder = lab.data / "glob[dir]*"
    folder.mkdir()
    for n, name in enumerate(HOSTILE):
        (lab.data / name).write_text(f"content {n}\n")
        (folder / name).write_text(f"nested {n}\n")
    # the deepest file's path in the snapshot's read clone (under the state folder) stays below PATH_MAX
    hostile.make(lab.data, deep_total=4000 - len(str(lab.state)) - 100)
    ctx = context(lab.loaded, state_dir=lab.state)
    record = run_backup(ctx).record
    with open_snapshot(lab.dataset, record.snapshot, tmp_path / "mnt") as snap:
        expected, expected_attributes = tree(snap), attributes(snap)
    assert set(HOSTILE) <= set(expected) and hostile.NOT_UTF8 in expected and hostile.DECOMPOSED in expected
    (entry,) = record.datasets
    assert entry.derived_files == 14 and entry.files == len(expected)
    assert entry.transferred_files == entry.checked_files == len(expected) - 1  # the long symlink: listing only

    latest = tmp_path / "latest"
    restore(ctx, KEY, latest)
    assert tree(latest) == expected and attributes(latest) == expected_attributes
    at = tmp_path / "at"
    assert restore(ctx, KEY, at, at=record.start + timedelta(seconds=1)).as_of == record.id
    assert tree(at) == expected
    part = tmp_path / "part"
    restore(ctx, KEY, part, subpath="glob[dir]*")
    assert tree(part) == {k: v for k, v in expected.items() if k.startswith("glob[dir]*/")}
    assert drill(ctx, full=True).result == "success"
    assert verify(ctx).result == "success"


def test_a_derived_object_damaged_on_the_remote_is_named_and_repaired(lab: Lab, tmp_path: Path) -> None:
    (lab.data / hostile.LONGEST).write_text("long\n")
    (lab.data / "short.txt").write_text("short\n")
    ctx = context(lab.loaded, state_dir=lab.state)
    run_backup(ctx)
    stored = sorted(p for p in lab.remote.rglob("*") if p.is_file() and p.stat().st_size == 32 + 16 + 5)
    assert len(stored) == 1  # the encrypted 5-byte file: 32-byte header, one 16-byte tag
    data = bytearray(stored[0].read_bytes())
    data[-1] ^= 1
    stored[0].write_bytes(bytes(data))
    with pytest.raises(BackupError, match=names.object_name(hostile.LONGEST)):
        verify(ctx)
    assert run_backup(ctx).record.datasets[0].transferred_files == 1
    assert verify(ctx).result == "success"
    restore(ctx, KEY, tmp_path / "restored")
    assert (tmp_path / "restored" / hostile.LONGEST).read_text() == "long\n"


def test_on_an_sftp_remote_the_server_refuses_144_byte_names_and_derived_names_keep_them(
    make_pool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`rclone serve sftp` of a folder on ext4 (255-byte names): the limit homelab derives names at is the
    real one, and a name changing from short to long and back between runs leaves no stale object."""
    with _serve("sftp", tmp_path / "server") as server:
        lab = _lab(make_pool, tmp_path, server)
        (lab.data / hostile.FITS).write_text("143 bytes\n")
        (lab.data / hostile.TOO_LONG).write_text("144 bytes\n")
        ctx = context(lab.loaded, state_dir=lab.state)

        # without derived names the server itself refuses the 144-byte name's encrypted form
        monkeypatch.setattr(names, "MAX_NAME_BYTES", 10_000)
        with pytest.raises(BackupError, match="too long"):
            run_backup(ctx)
        monkeypatch.undo()

        before = tree(lab.data)
        first = run_backup(ctx).record
        assert first.datasets[0].derived_files == 1
        (lab.data / hostile.TOO_LONG).rename(lab.data / "now-short.txt")
        (lab.data / hostile.FITS).rename(lab.data / hostile.LONGEST)
        after = tree(lab.data)
        time.sleep(1.1)  # runs are told apart by the second they started in (restore --at)
        second = run_backup(ctx).record
        assert second.datasets[0].derived_files == 1
        for record, expected in ((first, before), (second, after)):
            restored = tmp_path / f"at-{record.id}"
            assert restore(ctx, KEY, restored, at=record.start).as_of == record.id
            assert tree(restored) == expected
        assert verify(ctx).result == "success"  # no stale object: verify would name it "not in the snapshot"


def test_a_failed_derived_name_sync_leaves_no_stale_object_and_verify_names_a_stray_one(
    lab: Lab, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run after a long name went away loses the remote as its derived-name sync starts; the next run
    moves the old object to its archive (restore --at the first run still finds it), and an object put under
    `.homelab-names` by hand is named by verify and archived by the next run."""
    (lab.data / hostile.LONGEST).write_text("long\n")
    (lab.data / "short.txt").write_text("short\n")
    ctx = context(lab.loaded, state_dir=lab.state)
    first = run_backup(ctx).record
    remote = ctx.remotes[0]
    derived = f"{ctx.remote_path(remote, 'current', KEY)}/{names.FOLDER}"
    old = names.object_name(hostile.LONGEST).rpartition("/")[2]
    assert ctx.rclone.list_files(derived) == [old]

    (lab.data / hostile.LONGEST).rename(lab.data / "was-long.txt")
    real = ctx.rclone.sync

    def sync(source: Path, dst: str, **options: Any) -> Result:
        if not dst.endswith("/" + names.FOLDER):
            return real(source, dst, **options)
        return Result(False, 1, timed_out=True, errors=["no answer from the remote for 300 s"])

    monkeypatch.setattr(ctx.rclone, "sync", sync)
    time.sleep(1.1)  # runs are told apart by the second they started in
    with pytest.raises(BackupError, match="300 s"):
        run_backup(ctx)
    monkeypatch.undo()
    time.sleep(1.1)
    third = run_backup(ctx).record
    assert ctx.rclone.list_files(derived) == []
    assert ctx.rclone.list_files(ctx.remote_path(remote, "archive", third.id, KEY, names.FOLDER)) == [old]
    restore(ctx, KEY, tmp_path / "first", at=first.start)
    assert (tmp_path / "first" / hostile.LONGEST).read_text() == "long\n"
    assert verify(ctx).result == "success"

    stray = tmp_path / "stray"
    stray.write_text("no entry points at me\n")
    ctx.rclone.copyto(str(stray), f"{derived}/{names.object_name('gone').rpartition('/')[2]}")
    with pytest.raises(BackupError, match=f"not in the snapshot: {names.object_name('gone')}"):
        verify(ctx)
    fourth = run_backup(ctx).record
    assert ctx.rclone.list_files(derived) == []
    assert ctx.rclone.list_files(ctx.remote_path(remote, "archive", fourth.id, KEY, names.FOLDER)) == [
        names.object_name("gone").rpartition("/")[2]
    ]
    assert verify(ctx).result == "success"


def test_a_path_deeper_than_path_max_round_trips_through_real_rclone(lab: Lab, tmp_path: Path) -> None:
    """Folders made one inside the other by relative calls on zfs-fuse, past PATH_MAX: rclone reads the files
    at the bottom through a chain of symlinks (homelab.backup.longpath.Hops), the restore writes them with
    openat; content, owners, modes, mtimes, hardlinks (one of them at the top), a symlink and an empty folder
    come back exactly through restore, restore --at, a full drill and verify."""
    hostile.make_beyond_path_max(lab.data, total=6000)
    (lab.data / "short.txt").write_text("short\n")
    ctx = context(lab.loaded, state_dir=lab.state)
    record = run_backup(ctx).record
    with open_snapshot(lab.dataset, record.snapshot, tmp_path / "mnt") as snap:
        expected = hostile.manifest(snap)
    assert max(len(p.encode()) for p in expected) > 6000 and expected["shallow-hardlink.txt"][-1] == 3
    assert record.datasets[0].derived_files == 3
    restore(ctx, KEY, tmp_path / "latest")
    assert hostile.manifest(tmp_path / "latest") == expected
    restore(ctx, KEY, tmp_path / "at", at=record.start + timedelta(seconds=1))
    assert hostile.manifest(tmp_path / "at") == expected
    assert drill(ctx, full=True).result == "success"
    assert verify(ctx).result == "success"
