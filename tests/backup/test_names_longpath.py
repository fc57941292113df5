"""Paths deeper than PATH_MAX (4,096 bytes; made by relative calls) against the fakes: backed up and restored
exactly - content, owner, mode, mtime, hardlinks, symlinks, an empty folder - through restore, restore --at,
a subpath restore, a full drill and verify (homelab.backup.longpath; the real rclone: test_names_real.py)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import pytest

from homelab.backup import BackupError, drill, longpath, names, restore, run_backup, verify
from homelab.errors import HomelabError
from tests.backup import hostile_names as hostile
from tests.backup.conftest import KEY
from tests.backup.fast import ContentZfs, FastLab, make_fast_lab
from tests.fakes.zfs import FakeZfs


class DeepZfs(ContentZfs):
    """The ZFS fake, copying snapshots and clones openat by openat (GNU cp stops at PATH_MAX)."""

    def snapshot(self, dataset: str, name: str) -> str:
        full = FakeZfs.snapshot(self, dataset, name)
        hostile.copy_tree(Path(self.get(dataset, "mountpoint")), self._copy(full))
        return full

    def clone(self, snapshot: str, name: str, properties: Mapping[str, str] | None = None) -> None:
        FakeZfs.clone(self, snapshot, name, properties)
        hostile.copy_tree(self._copy(snapshot), Path(self.local[name]["mountpoint"]))


@pytest.fixture
def lab(tmp_path: Path) -> FastLab:
    lab = make_fast_lab(tmp_path)
    lab.zfs = DeepZfs(lab.zfs.store)
    lab.zfs.add_dataset(lab.dataset, lab.data)
    return lab


def test_a_path_deeper_than_path_max_comes_back_exactly(lab: FastLab, tmp_path: Path) -> None:
    bottom = hostile.make_beyond_path_max(lab.data, total=9000)
    (lab.data / "short.txt").write_text("short\n")
    expected = hostile.manifest(lab.data)
    assert max(len(os.fsencode(p)) for p in expected) > 9000
    assert expected["shallow-hardlink.txt"][-1] == 3
    assert expected[f"{bottom}/deep.txt"][5] == {"user.deep": b"at the bottom"}
    ctx = lab.ctx()
    record = run_backup(ctx).record
    (entry,) = record.datasets
    assert entry.files == sum(what != "folder" for what, *_ in expected.values())
    assert entry.derived_files == 3  # deep.txt, its second name, the 255-byte name; the symlink: listing only
    stored = lab.current / names.object_name(f"{bottom}/deep.txt")
    assert stored.read_text() == "at the bottom\n"

    restore(ctx, KEY, tmp_path / "latest")
    assert hostile.manifest(tmp_path / "latest") == expected
    restore(ctx, KEY, tmp_path / "at", at=record.start)
    assert hostile.manifest(tmp_path / "at") == expected
    top = bottom.split("/")[0]
    restore(ctx, KEY, tmp_path / "part", subpath=top)
    part = {k: v[:-1] for k, v in hostile.manifest(tmp_path / "part").items()}  # the top name is not in it
    assert part == {k: v[:-1] for k, v in expected.items() if k.startswith(top)}
    assert drill(ctx, full=True).result == "success"
    assert verify(ctx).result == "success"


def test_a_path_too_deep_for_rclone_fails_the_run_naming_it(lab: FastLab) -> None:
    """Past MAX_HOPS symlinks of BODY bytes (about 150 KB) rclone could not follow the chain: the run fails
    naming the path, shortened, before anything is uploaded."""
    hostile.make_beyond_path_max(lab.data, total=longpath.MAX_HOPS * longpath.BODY + 5000)
    with pytest.raises(HomelabError, match=r"^000p+\.\.\.L+\.txt \(\d+ bytes\): too deep to be read by rclone"):
        run_backup(lab.ctx())


def test_hops_reach_a_long_path_through_short_symlinks(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    bottom = hostile.make_beyond_path_max(tmp_path / "data", 20000)
    hops = longpath.Hops(tmp_path / "hops")
    deep = tmp_path / "data" / bottom / "deep.txt"
    reached = hops.to(deep)
    assert not longpath.is_long(reached) and reached.read_text() == "at the bottom\n"
    assert hops.to(deep.parent / "deep-hardlink.txt").parent == reached.parent  # the hops are shared
    bodies = [os.readlink(hop) for hop in (tmp_path / "hops").iterdir()]
    assert bodies and all(len(os.fsencode(b)) <= longpath.BODY for b in bodies)
    with longpath.short(deep) as short:
        assert short.read_text() == "at the bottom\n" and not longpath.is_long(short)
    with longpath.short(tmp_path / "data" / bottom / "missing" / "x") as short:
        assert not short.exists()


def test_a_deep_file_missing_on_the_remote_fails_the_restore_naming_it_shortened(lab: FastLab, tmp_path: Path) -> None:
    bottom = hostile.make_beyond_path_max(lab.data, total=6000)
    ctx = lab.ctx()
    run_backup(ctx)
    (lab.current / names.object_name(f"{bottom}/deep.txt")).unlink()
    with pytest.raises(BackupError, match=r"incomplete: 000p+\.\.\.p+/deep.txt \(\d+ bytes\): not restored"):
        restore(ctx, KEY, tmp_path / "restored")
