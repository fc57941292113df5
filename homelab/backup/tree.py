"""What a snapshot holds, entry by entry: kind, mode, owner, mtime, size, link target, hardlinks, holes, xattrs.

rclone through crypt carries names, content and file mtimes, not owners, modes, folder times, links between
files, holes or extended attributes, so each run records this listing (`manifests/` in the state folder, and
encrypted on the remote under `meta/`) and a restore applies it: owners (when root), modes and mtimes of
files, folders and symlinks, empty folders, hardlinks (each name is uploaded; the restore links them again),
holes of sparse files (zero blocks punched out again) and `user.*` xattrs and POSIX ACLs.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from homelab.backup import longpath
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
    link: str = ""  # a file with several names (hardlinks): the first of them (sorted), on every other one
    sparse: bool = False  # a file with fewer blocks than its size: restored with its zero blocks as holes
    xattrs: tuple[tuple[str, str], ...] = ()  # the kept extended attributes (KEPT_XATTRS), values in hex
    stored_as: str = ""  # a name the remote cannot hold: its derived object, or IN_LISTING (homelab.backup.names)

    @property
    def rclone_name(self) -> str:
        """The object's name on the remote as rclone spells it: its derived name, else its path (control
        characters as pictures; symlinks as .rclonelink)."""
        return self.stored_as or encode_name(self.path) + (LINK_SUFFIX if self.kind == "l" else "")

    @property
    def has_object(self) -> bool:
        return self.kind != "d" and self.stored_as != IN_LISTING


# user attributes and POSIX ACLs; not security.* (SELinux labels, capabilities: the restoring host decides)
KEPT_XATTRS = ("user.", "system.posix_acl_access", "system.posix_acl_default")
BLOCK = 4096  # the granularity of holes punched at restore
IN_LISTING = "-"  # stored_as of a symlink or folder whose name needs deriving: no object, the listing holds it


def has_xattrs(root: Path) -> bool:
    """Whether the filesystem of root keeps xattrs (zfs-fuse does not): asked once, not once per file."""
    try:
        os.listxattr(root)
    except OSError:
        return False
    return True


def _xattrs(path: str | Path) -> tuple[tuple[str, str], ...]:
    try:
        names = os.listxattr(path, follow_symlinks=False)
    except OSError:  # not on this file (a symlink's target gone, a race): nothing to keep
        return ()
    kept = sorted(n for n in names if n.startswith(KEPT_XATTRS))
    return tuple((n, os.getxattr(path, n, follow_symlinks=False).hex()) for n in kept)


def _entry(path: str, st: os.stat_result, target: str = "", where: str | Path | None = None) -> Entry:
    kind = "l" if stat.S_ISLNK(st.st_mode) else "d" if stat.S_ISDIR(st.st_mode) else "f"
    size = st.st_size if kind == "f" else 0
    sparse = kind == "f" and st.st_blocks * 512 < size
    xattrs = _xattrs(where) if where is not None and kind != "l" else ()
    mode = stat.S_IMODE(st.st_mode)
    return Entry(path, kind, mode, st.st_uid, st.st_gid, st.st_mtime_ns, size, target, "", sparse, xattrs)


def scan(root: Path) -> list[Entry]:
    """Every folder, regular file and symlink under root (one lstat each; symlinks are not followed), sorted."""
    xattrs = has_xattrs(root)
    entries = [_entry("", root.lstat(), where=root if xattrs else None)]
    inodes: dict[str, tuple[int, int]] = {}  # files with several names
    pending = [("", str(root))]
    while pending:
        prefix, folder = pending.pop()
        # a folder whose entries are past PATH_MAX is read through a short path to it (homelab.backup.longpath)
        with longpath.short(Path(folder), inside=True) as here, os.scandir(here) as items:
            for item in items:
                rel = prefix + item.name
                st = item.stat(follow_symlinks=False)
                if item.is_symlink():
                    entries.append(_entry(rel, st, os.readlink(item.path)))  # noqa: PTH115 - scandir gives str
                    continue
                if item.is_dir(follow_symlinks=False):
                    pending.append((rel + "/", f"{folder}/{item.name}"))
                elif not stat.S_ISREG(st.st_mode):
                    continue  # a socket, FIFO or device: rclone skips them, so the listing does too
                elif st.st_nlink > 1:
                    inodes[rel] = (st.st_dev, st.st_ino)
                entries.append(_entry(rel, st, where=item.path if xattrs else None))
    entries.sort()
    first: dict[tuple[int, int], str] = {}
    for n, e in enumerate(entries):
        if e.path in inodes:
            name = first.setdefault(inodes[e.path], e.path)
            if name != e.path:
                entries[n] = e._replace(link=name)
    return entries


def rclone_names(entries: list[Entry]) -> list[str]:
    """The objects on the remote: the names rclone --links makes of files and symlinks, and derived names
    (folders are implied)."""
    return [e.rclone_name for e in entries if e.has_object]


def total_bytes(entries: list[Entry]) -> int:
    return sum(e.size for e in entries)


def dumps(entries: list[Entry]) -> bytes:
    # ASCII: a name that is not UTF-8 (surrogate escapes) is kept exactly, as \udcXX
    return json.dumps({"version": 1, "entries": [list(e) for e in entries]}).encode()


XATTRS = Entry._fields.index("xattrs")


def loads(data: bytes) -> list[Entry]:
    """Listings from before hardlinks, holes and xattrs were kept read with none of them."""
    return [_row(row) for row in json.loads(data)["entries"]]


def _row(row: list[Any]) -> Entry:
    if len(row) > XATTRS:
        row = [*row[:XATTRS], tuple((name, value) for name, value in row[XATTRS]), *row[XATTRS + 1 :]]  # JSON lists
    return Entry(*row)


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
    xattrs_failed: list[str] = field(default_factory=list)  # the target filesystem refused them


_FALLOC_FL_KEEP_SIZE, _FALLOC_FL_PUNCH_HOLE = 0x01, 0x02
_libc = ctypes.CDLL(None, use_errno=True)


def punch_holes(path: Path) -> None:
    """Make the zero blocks of a file holes again, in place (its inode, so its hardlinks, unchanged); where the
    filesystem cannot, the file stays fully allocated (its content is the same)."""
    zero = bytes(BLOCK)
    fd = os.open(path, os.O_RDWR)
    try:
        offset, start = 0, None  # start: the first block of the run of zero blocks being read
        while chunk := os.pread(fd, 256 * BLOCK, offset):
            for at in range(0, len(chunk), BLOCK):
                block = chunk[at : at + BLOCK]
                if block == zero[: len(block)]:
                    start = offset + at if start is None else start
                elif start is not None:
                    _punch(fd, start, offset + at - start)
                    start = None
            offset += len(chunk)
        if start is not None:
            _punch(fd, start, offset - start)
    finally:
        os.close(fd)


def _punch(fd: int, offset: int, length: int) -> None:
    mode = _FALLOC_FL_PUNCH_HOLE | _FALLOC_FL_KEEP_SIZE
    _libc.fallocate(fd, mode, ctypes.c_int64(offset), ctypes.c_int64(length))  # an error leaves the zeros


def apply(target: Path, entries: list[Entry]) -> Applied:
    """Give restored entries their recorded owner, mode and mtime; create recorded folders that are missing.

    Deepest first, folders after their contents, so setting a folder's mtime is the last write inside it.
    Entries that were not restored (a subpath restore, a failed copy) are skipped.
    """
    done = Applied()
    as_root = os.geteuid() == 0
    done.owners_skipped = not as_root
    for e in entries:  # first, so each folder's mtime set below is the last write inside it
        if e.link:
            with longpath.short(target / e.path) as path, longpath.short(target / e.link) as first:
                if path.is_file() and first.is_file() and not path.samefile(first):
                    path.unlink()
                    os.link(first, path)
    # the root ("") is one level above the top-level entries: last of all, after any folder created in it
    for e in sorted(entries, key=lambda e: (-(e.path.count("/") + bool(e.path)), e.kind == "d", e.path)):
        # a path deeper than PATH_MAX is reached through a short one (homelab.backup.longpath)
        with longpath.short(target / e.path if e.path else target, create=e.kind == "d") as path:
            if _apply_one(e, path, done, as_root):
                done.entries += 1
    return done


def _apply_one(e: Entry, path: Path, done: Applied, as_root: bool) -> bool:
    if e.kind == "d" and not path.exists():
        path.mkdir(parents=True)
        done.folders_created += 1
    if not path.is_symlink() and not path.exists():
        return False
    if (e.kind == "l") != path.is_symlink():
        return False
    if e.sparse and not e.link:
        punch_holes(path)
    for name, value in e.xattrs:
        try:
            os.setxattr(path, name, bytes.fromhex(value), follow_symlinks=False)
        except OSError as exc:
            done.xattrs_failed.append(f"{e.path or '.'}: {name}: {exc.strerror}")
    if as_root:
        os.chown(path, e.uid, e.gid, follow_symlinks=False)
    if e.kind != "l":
        path.chmod(e.mode)
    os.utime(path, ns=(e.mtime_ns, e.mtime_ns), follow_symlinks=False)
    return True


def differences(expected: list[Entry], root: Path) -> list[str]:
    """How the metadata under root differs from the recorded entries (owner only when root)."""
    problems = []
    as_root = os.geteuid() == 0
    xattrs = has_xattrs(root)
    for e in expected:
        with longpath.short(root / e.path if e.path else root) as path, longpath.short(root / e.link) as first:
            problem = _difference(e, path, first, as_root, xattrs)
        if problem:
            problems.append(problem)
    return problems


def _difference(e: Entry, path: Path, first: Path, as_root: bool, xattrs: bool) -> str | None:
    try:
        got = _entry(e.path, path.lstat(), str(path.readlink()) if e.kind == "l" else "", path if xattrs else None)
    except FileNotFoundError:
        return f"{longpath.shown(e.path)}: not restored"
    wanted = [("kind", e.kind, got.kind), ("target", e.target, got.target), ("mtime", e.mtime_ns, got.mtime_ns)]
    wanted.append(("xattrs", e.xattrs, got.xattrs))
    if e.link:
        linked = first.exists() and path.samefile(first)
        wanted.append(("hardlink to", e.link, e.link if linked else "none"))
    if e.kind != "l":
        wanted.append(("mode", oct(e.mode), oct(got.mode)))
    if as_root:
        wanted += [("uid", e.uid, got.uid), ("gid", e.gid, got.gid)]
    for what, want, have in wanted:
        if want != have:
            return f"{longpath.shown(e.path) or '.'}: {what} {have} (snapshot: {want})"
    return None
