"""homelab.backup.tree on a plain folder: the listing a run records is what a restore gives back."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from homelab.backup import tree


def _sample(root: Path) -> None:
    (root / "app" / "empty").mkdir(parents=True)
    (root / "app" / "db.sqlite").write_bytes(b"x" * 100)
    (root / "app" / "db.sqlite").chmod(0o640)
    os.chown(root / "app" / "db.sqlite", 1000, 33)
    (root / "app").chmod(0o2750)
    os.symlink("db.sqlite", root / "app" / "current")
    for n, path in enumerate([root / "app" / "db.sqlite", root / "app" / "empty", root / "app"]):
        os.utime(path, ns=(1_600_000_000_000_000_000 + n, 1_600_000_000_000_000_000 + n))


def test_apply_restores_what_scan_recorded(tmp_path: Path) -> None:
    source = tmp_path / "source"
    source.mkdir()
    _sample(source)
    entries = tree.scan(source)
    assert tree.loads(tree.dumps(entries)) == entries
    assert tree.rclone_names(entries) == ["app/current.rclonelink", "app/db.sqlite"]
    assert tree.total_bytes(entries) == 100
    # what rclone gives back: content and links, new owners/modes/times, no empty folders
    target = tmp_path / "target"
    shutil.copytree(source, target, symlinks=True, ignore=shutil.ignore_patterns("empty"))
    os.chown(target / "app" / "db.sqlite", 0, 0)
    (target / "app" / "db.sqlite").chmod(0o644)
    assert tree.differences(entries, target)
    applied = tree.apply(target, entries)
    assert applied.folders_created == 1 and not applied.owners_skipped
    assert tree.differences(entries, target) == []
    assert tree.fingerprint(tree.scan(target)) == tree.fingerprint(entries)


def test_not_root_keeps_owners_and_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = tmp_path / "source"
    source.mkdir()
    _sample(source)
    entries = tree.scan(source)
    target = tmp_path / "target"
    shutil.copytree(source, target, symlinks=True)
    os.chown(target / "app" / "db.sqlite", 0, 0)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    applied = tree.apply(target, entries)
    assert applied.owners_skipped
    assert (target / "app" / "db.sqlite").stat().st_uid == 0  # not chowned
    assert tree.differences(entries, target) == []  # owners are not compared when not root


def test_a_top_level_folder_created_by_apply_leaves_the_root_mtime_as_recorded(tmp_path: Path) -> None:
    """Folders rclone does not restore (empty ones) are made by apply; the root's mtime is set after them."""
    source = tmp_path / "source"
    (source / "empty").mkdir(parents=True)
    (source / "file").write_bytes(b"x")
    for path in (source / "empty", source / "file", source):
        os.utime(path, ns=(1_500_000_000_000_000_000, 1_500_000_000_000_000_000))
    entries = tree.scan(source)
    target = tmp_path / "target"
    target.mkdir()
    shutil.copy2(source / "file", target / "file")
    assert tree.apply(target, entries).folders_created == 1
    assert target.stat().st_mtime_ns == 1_500_000_000_000_000_000
    assert tree.differences(entries, target) == []
