"""What a snapshot holds, entry by entry: kind, mode, owner, mtime, size, link target.

rclone through crypt carries names, content and file mtimes, not owners, modes or folder times, so each run
records this listing (`manifests/` in the state folder, and encrypted on the remote under `meta/`) and a
restore applies it: owners (when root), modes and mtimes of files, folders and symlinks, and empty folders.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from homelab.runtime.rclone import LINK_SUFFIX, encode_name


class Entry(NamedTuple):
    path: str  # relative to the dataset root, "" for the root itself
    kind: str  # "f" file, "d" folder, "l" symlink
    mode: int  # permission bits with setuid/setgid/sticky
    uid: int
    gid: int
    mtime_ns: int
    size: int
    target: str  # a symlink's target, else ""

    @property
    def rclone_name(self) -> str:
        """The object's name as rclone spells it (control characters as pictures; symlinks as .rclonelink)."""
        return encode_name(self.path) + (LINK_SUFFIX if self.kind == "l" else "")


def _entry(path: str, st: os.stat_result, target: str = "") -> Entry:
    kind = "l" if stat.S_ISLNK(st.st_mode) else "d" if stat.S_ISDIR(st.st_mode) else "f"
    size = st.st_size if kind == "f" else 0
    return Entry(path, kind, stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, st.st_mtime_ns, size, target)


def scan(root: Path) -> list[Entry]:
    """Every folder, regular file and symlink under root (one lstat each; symlinks are not followed), sorted."""
    entries = [_entry("", root.lstat())]
    pending = [("", str(root))]
    while pending:
        prefix, folder = pending.pop()
        with os.scandir(folder) as items:
            for item in items:
                rel = prefix + item.name
                st = item.stat(follow_symlinks=False)
                if item.is_symlink():
                    entries.append(_entry(rel, st, os.readlink(item.path)))  # noqa: PTH115 - scandir gives str
                    continue
                if item.is_dir(follow_symlinks=False):
                    pending.append((rel + "/", item.path))
                elif not stat.S_ISREG(st.st_mode):
                    continue  # a socket, FIFO or device: rclone skips them, so the listing does too
                entries.append(_entry(rel, st))
    entries.sort()
    return entries


def rclone_names(entries: list[Entry]) -> list[str]:
    """The object names rclone --links makes of the files and symlinks (folders are implied)."""
    return [e.rclone_name for e in entries if e.kind != "d"]


def total_bytes(entries: list[Entry]) -> int:
    return sum(e.size for e in entries)


def dumps(entries: list[Entry]) -> bytes:
    # ASCII: a name that is not UTF-8 (surrogate escapes) is kept exactly, as \udcXX
    return json.dumps({"version": 1, "entries": [list(e) for e in entries]}).encode()


def loads(data: bytes) -> list[Entry]:
    return [Entry(*row) for row in json.loads(data)["entries"]]


def fingerprint(entries: list[Entry]) -> str:
    return hashlib.sha256(dumps(entries)).hexdigest()


def under(entries: list[Entry], subpath: str) -> list[Entry]:
    if not subpath:
        return entries
    return [e for e in entries if e.path == subpath or e.path.startswith(subpath + "/")]


@dataclass
class Applied:
    entries: int = 0
    folders_created: int = 0
    owners_skipped: bool = False  # not root: files keep the restoring user as owner


def apply(target: Path, entries: list[Entry]) -> Applied:
    """Give restored entries their recorded owner, mode and mtime; create recorded folders that are missing.

    Deepest first, folders after their contents, so setting a folder's mtime is the last write inside it.
    Entries that were not restored (a subpath restore, a failed copy) are skipped.
    """
    done = Applied()
    as_root = os.geteuid() == 0
    done.owners_skipped = not as_root
    # the root ("") is one level above the top-level entries: last of all, after any folder created in it
    for e in sorted(entries, key=lambda e: (-(e.path.count("/") + bool(e.path)), e.kind == "d", e.path)):
        path = target / e.path if e.path else target
        if e.kind == "d" and not path.exists():
            path.mkdir(parents=True)
            done.folders_created += 1
        if not path.is_symlink() and not path.exists():
            continue
        if (e.kind == "l") != path.is_symlink():
            continue
        if as_root:
            os.chown(path, e.uid, e.gid, follow_symlinks=False)
        if e.kind != "l":
            path.chmod(e.mode)
        os.utime(path, ns=(e.mtime_ns, e.mtime_ns), follow_symlinks=False)
        done.entries += 1
    return done


def differences(expected: list[Entry], root: Path) -> list[str]:
    """How the metadata under root differs from the recorded entries (owner only when root)."""
    problems = []
    as_root = os.geteuid() == 0
    for e in expected:
        path = root / e.path if e.path else root
        try:
            got = _entry(e.path, path.lstat(), str(path.readlink()) if e.kind == "l" else "")
        except FileNotFoundError:
            problems.append(f"{e.path}: not restored")
            continue
        wanted = [("kind", e.kind, got.kind), ("target", e.target, got.target), ("mtime", e.mtime_ns, got.mtime_ns)]
        if e.kind != "l":
            wanted.append(("mode", oct(e.mode), oct(got.mode)))
        if as_root:
            wanted += [("uid", e.uid, got.uid), ("gid", e.gid, got.gid)]
        for what, want, have in wanted:
            if want != have:
                problems.append(f"{e.path or '.'}: {what} {have} (snapshot: {want})")
                break
    return problems
