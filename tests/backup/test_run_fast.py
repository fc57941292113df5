"""`backup run` against the fakes (tests/fakes/rclone.py, tests/backup/fast.py): records, modes of what is
written, failures and what they leave behind (names: test_names_fast.py)."""

from __future__ import annotations

import json
import os
import stat
import struct
import subprocess
from pathlib import Path

import pytest

from homelab.backup import BackupError, drill, restore, run_backup
from homelab.backup.records import Run
from homelab.backup.state import StateError
from homelab.backup.tree import differences
from homelab.runtime.rclone import Result
from tests.backup.conftest import KEY, attributes, fill, tree
from tests.backup.fast import FastLab, make_fast_lab


@pytest.fixture
def lab(tmp_path: Path) -> FastLab:
    return make_fast_lab(tmp_path)


def _objects(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() or p.is_symlink()}


def test_a_run_uploads_every_object_and_records_it(lab: FastLab) -> None:
    fill(lab.data, small=30, large=1, large_size=4096, sparse=1 << 16)
    (lab.data / "new\nline.txt").write_text("a name with a newline")
    ctx = lab.ctx()
    record = run_backup(ctx).record
    expected = {str(p.relative_to(lab.data)) for p in lab.data.rglob("*") if p.is_file() or p.is_symlink()}
    expected = {n + ".rclonelink" if (lab.data / n).is_symlink() else n for n in expected}
    # the remote holds rclone's spelling of a name: a control character as its Unicode picture
    expected = (expected - {"new\nline.txt"}) | {"new\u240aline.txt"}
    assert _objects(lab.current) == expected
    (entry,) = record.datasets
    assert (record.result, entry.result, entry.files) == ("success", "success", len(expected))
    assert entry.transferred_files == entry.checked_files == len(expected)
    assert entry.tree == f"meta/{KEY}/{record.id}.json.gz"
    assert (lab.rclone.root / "offsite" / entry.tree).is_file()
    saved = Run.model_validate_json((lab.state / "runs" / f"{record.id}.json").read_text())
    assert saved == record and json.loads(saved.model_dump_json())["schema_version"] == 1
    assert int((lab.state / "offsite.last_success").read_text()) == int(lab.clock.now.timestamp())

    # a second run with nothing changed writes nothing and does not upload the listing again
    lab.clock.advance(hours=1)
    again = run_backup(ctx).record.datasets[0]
    assert again.transferred_files == 0 and again.tree == entry.tree
    listings = [c for c in lab.rclone.calls if c[0] == "copyto" and ":meta/" in str(c[2])]
    assert len(listings) == 1


def test_state_files_naming_files_are_private(lab: FastLab) -> None:
    fill(lab.data, small=3, large=0, sparse=1 << 12)
    ctx = lab.ctx()
    run_backup(ctx)
    for folder in ("runs", "manifests", "private"):
        assert stat.S_IMODE((lab.state / folder).stat().st_mode) == 0o700, folder
    for path in [
        *(lab.state / "runs").iterdir(),
        *(lab.state / "manifests").iterdir(),
        lab.state / "private/rclone.conf",
    ]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert stat.S_IMODE((lab.state / "offsite.last_success").stat().st_mode) == 0o644  # collectd reads it


def test_a_relative_state_dir_is_made_absolute(lab: FastLab, tmp_path: Path) -> None:
    fill(lab.data, small=3, large=0, sparse=1 << 12)
    os.chdir(tmp_path)
    ctx = lab.ctx(state_dir=Path("relative-state"))
    assert ctx.state.root == tmp_path / "relative-state"
    record = run_backup(ctx).record
    assert (tmp_path / "relative-state" / "runs" / f"{record.id}.json").exists()


def test_a_failed_sync_fails_the_run_with_the_reason(lab: FastLab) -> None:
    fill(lab.data, small=3, large=0, sparse=1 << 12)
    lab.rclone.fail["sync"] = Result(False, 1, errors=["a/b: no space left on device"])
    ctx = lab.ctx()
    with pytest.raises(BackupError, match=r"rstudio/home -> offsite: the remote is full \(ENOSPC\): a/b: no space"):
        run_backup(ctx)
    last = ctx.state.runs()[-1]
    assert last.result == "failed" and last.datasets[0].result == "failed" and last.end is not None
    assert not ctx.state.running_path.exists()
    assert not (lab.state / "offsite.last_success").exists()


def test_a_damaged_upload_fails_the_run_naming_the_file(lab: FastLab, monkeypatch: pytest.MonkeyPatch) -> None:
    fill(lab.data, small=3, large=0, sparse=1 << 12)
    original = lab.rclone.sync

    def sync_then_damage(*args, **kwargs):
        result = original(*args, **kwargs)
        (lab.current / "plaincanary.txt").write_bytes(b"flipped")
        return result

    monkeypatch.setattr(lab.rclone, "sync", sync_then_damage)
    with pytest.raises(BackupError, match=r"cryptcheck: differs: plaincanary.txt"):
        run_backup(lab.ctx())


def test_a_listing_that_cannot_be_uploaded_fails_the_run(lab: FastLab) -> None:
    fill(lab.data, small=3, large=0, sparse=1 << 12)
    lab.rclone.fail["copyto"] = Result(False, 1, errors=["denied"])
    with pytest.raises(BackupError, match=r"upload of the file listing failed"):
        run_backup(lab.ctx())


def test_an_unreadable_record_is_an_error_naming_the_file(lab: FastLab) -> None:
    fill(lab.data, small=3, large=0, sparse=1 << 12)
    ctx = lab.ctx()
    run_backup(ctx)
    broken = lab.state / "runs" / "20250101T000000Z.json"
    broken.write_text('{"id": "20250101T000000Z", "start": "yesterday"')
    with pytest.raises(StateError, match=rf"{broken}: not a readable run record"):
        run_backup(ctx)
    broken.write_text('{"id": "x", "start": "2025-01-01T00:00:00Z", "result": "maybe", "snapshot": "s", "remotes": []}')
    with pytest.raises(StateError, match=rf"{broken}: not a readable run record \(result: "):
        ctx.state.runs()


def test_a_run_killed_earlier_is_recorded_as_interrupted_and_its_partials_removed(lab: FastLab) -> None:
    fill(lab.data, small=3, large=0, sparse=1 << 12)
    ctx = lab.ctx()
    dead = subprocess.Popen(["true"])
    dead.wait()
    ghost = Run(id="20250228T030000Z", start=lab.clock.now, snapshot="homelab-20250228T030000Z", remotes=["offsite"])
    ghost.pid = dead.pid
    ctx.state.save_run(ghost)
    leftover = lab.current / "plaincanary.txt.0123abcd.partial"
    leftover.parent.mkdir(parents=True)
    leftover.write_text("half")
    run_backup(ctx)
    runs = ctx.state.runs()
    assert [r.result for r in runs] == ["interrupted", "success"]
    assert not leftover.exists()
    assert ("delete", "hl-offsite-crypt:current", "*.????????.partial") in lab.rclone.calls


def test_only_one_run_at_a_time(lab: FastLab) -> None:
    ctx = lab.ctx()
    with ctx.state.lock(), pytest.raises(Exception, match=r"another backup is running"):
        run_backup(ctx)


def test_an_unknown_dataset_is_refused(lab: FastLab) -> None:
    with pytest.raises(Exception, match=r"not a backed-up dataset: nope/x \(known: rstudio/home\)"):
        run_backup(lab.ctx(), ["nope/x"])


def test_a_snapshot_of_the_same_second_does_not_fail_the_run(lab: FastLab) -> None:
    from homelab.backup import take_snapshots

    fill(lab.data, small=3, large=0, sparse=1 << 12)
    ctx = lab.ctx()
    (taken,) = take_snapshots(ctx)
    record = run_backup(ctx).record
    assert taken.endswith("@homelab-20250301T030000Z") and record.id == "20250301T030000Z-1"


def test_progress_on_a_terminal_and_on_a_pipe() -> None:
    import io

    from homelab.backup.progress import Progress
    from homelab.runtime.rclone import Stats

    bar = io.StringIO()
    shown = Progress("a -> b", bar, interactive=True)
    shown(Stats(bytes=512, total_bytes=1024, transfers=1, total_transfers=2))
    shown(Stats(bytes=3 << 30, total_bytes=3 << 30, transfers=2, total_transfers=2))
    shown.done()
    assert bar.getvalue() == (
        "\r[###############               ] a -> b:  50% 512 B/1.0 KiB 1/2 files"
        "\r[##############################] a -> b: 100% 3.0 GiB/3.0 GiB 2/2 files\n"
    )
    plain = io.StringIO()
    lines = Progress("a -> b", plain, interactive=False, every=3600)
    lines(Stats(bytes=1, total_bytes=2))
    lines(Stats(bytes=2, total_bytes=2))  # too soon for a line: held back until done
    lines.done()
    assert plain.getvalue() == "a -> b:  50% 1 B/2 B 0/0 files\na -> b: 100% 2 B/2 B 0/0 files\n"


def test_sockets_and_fifos_are_left_out_so_a_restore_is_still_complete(lab: FastLab, tmp_path: Path) -> None:
    import socket

    from homelab.backup import restore

    fill(lab.data, small=3, large=0, sparse=1 << 12)
    os.mkfifo(lab.data / "a-fifo")
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(lab.data / "app.sock"))
        ctx = lab.ctx()
        record = run_backup(ctx).record
    entries = ctx.state.manifest(record.datasets[0].manifest)
    assert not {"a-fifo", "app.sock"} & {e.path for e in entries}
    restored = restore(ctx, KEY, tmp_path / "restored")
    assert restored.files == record.datasets[0].files


def _same_size_and_mtime(path: Path, data: bytes) -> None:
    """Rewrite a file in place keeping its size and mtime: what rclone's size+mtime comparison cannot see."""
    st = path.stat()
    assert len(data) == st.st_size
    path.write_bytes(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_a_run_after_a_failed_verify_uploads_the_damaged_objects_again(lab: FastLab) -> None:
    from homelab.backup import verify

    fill(lab.data, small=5, large=0, sparse=1 << 12)
    ctx = lab.ctx()
    run_backup(ctx)
    victim = lab.current / "plaincanary.txt"
    _same_size_and_mtime(victim, bytes(b ^ 1 for b in victim.read_bytes()))
    (lab.current / "plainempty.txt").unlink()
    lab.clock.advance(minutes=5)
    with pytest.raises(BackupError, match=r"differs: plaincanary\.txt"):
        verify(ctx)
    lab.clock.advance(minutes=5)
    said: list[str] = []
    run_backup(ctx, say=said.append)
    assert victim.read_bytes() == (lab.data / "plaincanary.txt").read_bytes()
    assert (lab.current / "plainempty.txt").exists()
    assert "repair  rstudio/home -> offsite: 2 objects the last verify found damaged or missing" in said
    lab.clock.advance(minutes=5)
    assert verify(ctx).result == "success"
    said.clear()
    run_backup(ctx, say=said.append)  # repaired by the previous run: nothing to repair now
    assert not [line for line in said if line.startswith("repair")]


def test_a_deep_run_catches_a_rewrite_with_the_same_size_and_mtime(lab: FastLab) -> None:
    fill(lab.data, small=5, large=0, sparse=1 << 12)
    ctx = lab.ctx()
    run_backup(ctx)
    source = lab.data / "plaincanary.txt"
    old = source.read_bytes()
    _same_size_and_mtime(source, old.upper())
    lab.clock.advance(hours=1)
    plain = run_backup(ctx).record
    assert plain.datasets[0].transferred_files == 0 and (lab.current / "plaincanary.txt").read_bytes() == old
    lab.clock.advance(hours=1)
    deep = run_backup(ctx, deep=True).record
    assert (lab.current / "plaincanary.txt").read_bytes() == old.upper()
    assert deep.datasets[0].transferred_files == 2  # the canary, and its other name (a hardlink)
    assert deep.datasets[0].checked_files == deep.datasets[0].files
    archived = lab.rclone.root / "offsite" / "archive" / deep.id / KEY / "plaincanary.txt"
    assert archived.read_bytes() == old  # the version it replaced, for restore --at


# a POSIX access ACL as the kernel stores it (version 2; tag, perm, id): user::rwx user:1000:r-x group::r-x
# mask::r-x other::---
ACL = struct.pack("<I", 2) + b"".join(
    struct.pack("<HHI", tag, perm, uid)
    for tag, perm, uid in [
        (1, 7, 2**32 - 1),
        (2, 5, 1000),
        (4, 5, 2**32 - 1),
        (0x10, 5, 2**32 - 1),
        (0x20, 0, 2**32 - 1),
    ]
)


def test_hardlinks_holes_and_xattrs_come_back(lab: FastLab, tmp_path: Path) -> None:
    """tmp_path is ext4 or tmpfs: xattrs work there (zfs-fuse has none). The snapshot fake copies with cp -a
    (links, holes and xattrs kept); the rclone fake, like rclone, writes each name as a separate, full file."""
    fill(lab.data, small=5, large=0, sparse=4 << 20)
    os.link(lab.data / "plaincanary.txt", lab.data / "plaindir-00" / "third-name.txt")
    os.setxattr(lab.data / "plaincanary.txt", "user.app.tag", b"\x00\xffbinary")
    os.setxattr(lab.data / "plaindir-01", "user.folder", b"x" * 300)
    os.setxattr(lab.data / "plainsparse.img", "user.empty", b"")
    os.setxattr(lab.data / "plaindir-02", "system.posix_acl_access", ACL)
    ctx = lab.ctx()
    record = run_backup(ctx).record
    snapshot = lab.zfs.snapshot_dir(lab.dataset, record.snapshot)
    target = tmp_path / "restored"
    restore(ctx, KEY, target)
    assert tree(target) == tree(snapshot) and attributes(target) == attributes(snapshot)
    inodes = {
        (target / n).stat().st_ino for n in ("plaincanary.txt", "plainhardlink.txt", "plaindir-00/third-name.txt")
    }
    assert len(inodes) == 1 and (target / "plaincanary.txt").stat().st_nlink == 3
    sparse = (target / "plainsparse.img").stat()
    assert sparse.st_size == 4 << 20 and sparse.st_blocks * 512 <= 64 << 10  # the holes are holes again
    assert os.getxattr(target / "plaincanary.txt", "user.app.tag") == b"\x00\xffbinary"
    assert os.getxattr(target / "plaindir-01", "user.folder") == b"x" * 300
    assert os.getxattr(target / "plainsparse.img", "user.empty") == b""
    assert os.getxattr(target / "plaindir-02", "system.posix_acl_access") == ACL
    assert drill(ctx, full=True).result == "success"  # compares links and xattrs too
    os.removexattr(target / "plaindir-01", "user.folder")
    listed = ctx.state.manifest(record.datasets[0].manifest)
    assert differences(listed, target) == [f"plaindir-01: xattrs () (snapshot: (('user.folder', '{'78' * 300}'),))"]
