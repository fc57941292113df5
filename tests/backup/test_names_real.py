"""Hostile names through real rclone crypt on a zfs-fuse dataset, to a local-dir remote and to `rclone serve
sftp` (a folder on ext4: 255-byte names): what the filesystem allows comes back exactly (newline, tab, glob
characters, leading dash, 143-byte names), through restore, restore --at and a full drill; what the crypt
cannot carry (NFC/NFD twins, 144+ byte names up to 255, names that are not UTF-8) fails the run naming each
file, before anything is uploaded."""

from __future__ import annotations

import os
import unicodedata
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from homelab.backup import BackupError, context, drill, names, restore, run_backup
from homelab.backup.zfs import open_snapshot
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
    ctx = context(lab.loaded, state_dir=lab.state)
    record = run_backup(ctx).record
    with open_snapshot(lab.dataset, record.snapshot, tmp_path / "mnt") as snap:
        expected, expected_attributes = tree(snap), attributes(snap)
    assert set(HOSTILE) <= set(expected)

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


def test_names_the_crypt_cannot_carry_fail_the_run_naming_them(lab) -> None:
    composed, decomposed = unicodedata.normalize("NFC", "café.txt"), unicodedata.normalize("NFD", "café.txt")
    (lab.data / composed).write_text("composed")
    (lab.data / decomposed).write_text("decomposed")
    (lab.data / ("L" * 144)).write_text("one byte too long")
    (lab.data / ("X" * 255)).write_text("the longest name the filesystem allows")
    (lab.data / os.fsdecode(b"not-utf8-\xff.txt")).write_bytes(b"latin-1 name")  # zfs-fuse: utf8only=off
    ctx = context(lab.loaded, state_dir=lab.state)
    with pytest.raises(BackupError) as failed:
        run_backup(ctx)
    message = str(failed.value)
    assert f"names differing only in Unicode normalisation: {composed}, {decomposed}" in message or (
        f"names differing only in Unicode normalisation: {decomposed}, {composed}" in message
    )
    assert f"name too long for the crypt (144 bytes, at most 143): {'L' * 144}" in message
    assert f"name too long for the crypt (255 bytes, at most 143): {'X' * 255}" in message
    assert "not UTF-8: 'not-utf8-\\udcff.txt'" in message
    assert not [p for p in lab.remote.rglob("*") if p.is_file()]  # nothing uploaded


def test_on_an_sftp_remote_143_bytes_fit_and_longer_names_are_refused_never_lost(
    make_pool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`rclone serve sftp` of a folder on ext4 (255-byte names): the limit homelab checks is the real one."""
    with _serve("sftp", tmp_path / "server") as server:
        lab = _lab(make_pool, tmp_path, server)
        fits, over, longest = "n" * 143, "o" * 144, "x" * 255
        for name in (fits, over, longest):
            (lab.data / name).write_text(f"{len(name)} bytes\n")
        ctx = context(lab.loaded, state_dir=lab.state)
        with pytest.raises(BackupError) as failed:
            run_backup(ctx)
        for name in (over, longest):
            assert f"name too long for the crypt ({len(name)} bytes, at most 143): {name}" in str(failed.value)
        assert fits not in str(failed.value)
        assert not [p for p in server.root.rglob("*") if p.is_file()]  # refused before anything was uploaded

        # without the check the server itself refuses the 144-byte name's encrypted form: the bound is exact
        monkeypatch.setattr(names, "MAX_NAME_BYTES", 10_000)
        (lab.data / longest).unlink()
        with pytest.raises(BackupError) as refused:
            run_backup(ctx)
        assert "too long" in str(refused.value), refused.value
        monkeypatch.undo()

        (lab.data / over).unlink()
        record = run_backup(ctx).record
        with open_snapshot(lab.dataset, record.snapshot, tmp_path / "mnt") as snap:
            expected = tree(snap)
        restore(ctx, KEY, tmp_path / "restored")
        assert tree(tmp_path / "restored") == expected and fits in expected
