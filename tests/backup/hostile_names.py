"""Names a backup must keep exactly, made in a dataset (shared by the fast and the real round trips)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import stat
import unicodedata
from pathlib import Path

COMPOSED, DECOMPOSED = unicodedata.normalize("NFC", "café.txt"), unicodedata.normalize("NFD", "café.txt")
LONGEST = "L" * 251 + ".txt"  # 255 bytes: the most a name can hold
LONG_UNICODE = "é" * 127  # 254 bytes in 127 characters
NOT_UTF8 = os.fsdecode(b"not-utf8-\xff.txt")
LOOKALIKE = "not-utf8-\ufffd.txt"  # what rclone reads NOT_UTF8 as
NEWLINE = "new\nline.txt"
QUOTED = "odd\u201bquote"
FITS = "n" * 143  # the longest name whose encrypted form fits in 255 characters
TOO_LONG = "o" * 144


def deep_path(root: Path, total: int) -> str:
    """A path of about `total` bytes below root: 100-byte folders, then a 255-byte name."""
    parts = []
    while sum(len(p) + 1 for p in parts) + 255 < total - 101:
        parts.append(f"{len(parts):03d}" + "d" * 97)
    return "/".join([*parts, "D" * 251 + ".bin"])


def make(root: Path, *, deep_total: int) -> dict[str, str]:
    """The hostile names under root; their contents (each different), by path."""
    files = {
        COMPOSED: "composed twin",
        DECOMPOSED: "decomposed twin, different content",
        LONGEST: "a 255-byte name",
        LONG_UNICODE: "a 254-byte name in 127 characters",
        NOT_UTF8: "a name that is not UTF-8",
        LOOKALIKE: "the name rclone would read the other one as",
        NEWLINE: "a newline in the name",
        QUOTED: "rclone's quoting character",
        FITS: "143 bytes: stored under its own name",
        TOO_LONG: "144 bytes: stored under a derived name",
        "twin-dir-" + COMPOSED + "/inside": "in a composed folder",
        "twin-dir-" + DECOMPOSED + "/inside": "in a decomposed folder",
        ("F" * 200) + "/short.txt": "a short name in a folder whose name is too long",
        deep_path(root, deep_total): "a 255-byte name at the end of a long path",
    }
    # a real path where derived objects are kept, named like the derived name of another file
    files[".homelab-names/" + hashlib.sha256(os.fsencode(LONGEST)).hexdigest()] = "not the 255-byte name"
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
    os.symlink(LONGEST, root / ("S" * 250 + ".link"))  # a symlink with a long name: kept in the listing
    os.link(root / LONGEST, root / ("H" * 250 + ".hard"))  # a second name of the 255-byte file
    (root / ("E" * 255)).mkdir()  # an empty folder with a long name
    return files


def make_beyond_path_max(root: Path, total: int) -> str:
    """Folders made one inside the other by relative calls (mkdirat/openat, as `mkdir x; cd x` step by step)
    to a path of about `total` bytes below root - past PATH_MAX - holding a file (owner 1000, mode 0600, an
    old mtime), a 255-byte name, a second name of the file, a symlink and an empty folder; and a third name
    of the file at the top. The bottom folder's path, relative to root."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    parts: list[str] = []
    try:
        while sum(len(p) + 1 for p in parts) < total:
            parts.append(f"{len(parts):03d}" + "p" * 197)
            os.mkdir(parts[-1], dir_fd=fd)
            inner = os.open(parts[-1], os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
        for name, text in (("deep.txt", "at the bottom\n"), (LONGEST, "a 255-byte name at the bottom\n")):
            out = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600, dir_fd=fd)
            os.write(out, text.encode())
            os.close(out)
        os.chown("deep.txt", 1000, 1000, dir_fd=fd)
        with contextlib.suppress(OSError):  # where the filesystem keeps xattrs (not zfs-fuse)
            os.setxattr(f"/proc/self/fd/{fd}/deep.txt", "user.deep", b"at the bottom")
        os.utime("deep.txt", ns=(1_500_000_000_123_456_789,) * 2, dir_fd=fd)
        os.link("deep.txt", "deep-hardlink.txt", src_dir_fd=fd, dst_dir_fd=fd)
        os.link("deep.txt", root / "shallow-hardlink.txt", src_dir_fd=fd)
        os.symlink("deep.txt", "deep-link", dir_fd=fd)
        os.mkdir("deep-empty", 0o750, dir_fd=fd)
    finally:
        os.close(fd)
    return "/".join(parts)


def manifest(root: Path) -> dict[str, tuple[object, ...]]:
    """Every entry below root, however deep (read with openat: os.fwalk): kind and content (sha256, link
    target), mode, owner, mtime, link count and `user.*` xattrs."""
    out: dict[str, tuple[object, ...]] = {}
    top = len(os.fsencode(root)) + 1
    for folder, dirs, files, fd in os.fwalk(root):
        rel = os.fsencode(folder)[top:]
        for name in dirs + files:
            path = os.fsdecode(rel + b"/" + os.fsencode(name) if rel else os.fsencode(name))
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                what = "link:" + os.readlink(name, dir_fd=fd)
            elif stat.S_ISDIR(st.st_mode):
                what = "folder"
            else:
                handle = os.open(name, os.O_RDONLY, dir_fd=fd)
                with os.fdopen(handle, "rb") as data:
                    what = hashlib.sha256(data.read()).hexdigest()
            links = 0 if what == "folder" else st.st_nlink
            out[path] = (what, st.st_mode, st.st_uid, st.st_gid, st.st_mtime_ns, _user_xattrs(fd, name), links)
    return out


def copy_tree(src: Path, dst: Path) -> None:
    """`cp -a src/. dst` for a tree deeper than PATH_MAX (GNU cp and tar stop there: "File name too long"):
    folders, files, symlinks, hardlinks, owners, modes and mtimes, read and written with openat."""
    first: dict[tuple[int, int], tuple[int, str]] = {}  # a file's first copy: its folder's descriptor, name
    dst.mkdir(parents=True, exist_ok=True)
    top = os.fsencode(src)
    # the folders being copied, outermost first: (source path, its copy's descriptor, its name, its stat)
    open_: list[tuple[bytes, int, str, os.stat_result]] = []
    for folder, dirs, files, fd in os.fwalk(top):
        base = folder.rpartition(b"/")[2]
        while open_ and not folder.startswith(open_[-1][0] + b"/"):
            _close(open_)
        if open_:
            out = os.open(base, os.O_RDONLY | os.O_DIRECTORY, dir_fd=open_[-1][1])
        else:
            out = os.open(dst, os.O_RDONLY | os.O_DIRECTORY)
        open_.append((folder, out, os.fsdecode(base), os.fstat(fd)))
        for name in (os.fsdecode(n) for n in dirs + files):
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                os.mkdir(name, dir_fd=out)
                continue
            if stat.S_ISLNK(st.st_mode):
                os.symlink(os.readlink(name, dir_fd=fd), name, dir_fd=out)
            elif (st.st_dev, st.st_ino) in first:
                where, linked = first[(st.st_dev, st.st_ino)]
                os.link(linked, name, src_dir_fd=where, dst_dir_fd=out)
                continue
            elif stat.S_ISREG(st.st_mode):
                _copy_file(name, fd, out)
                if st.st_nlink > 1:
                    first[(st.st_dev, st.st_ino)] = (os.dup(out), name)
            else:
                continue
            _dress(name, out, st, _user_xattrs(fd, name))
    while open_:
        _close(open_)
    for where, _ in first.values():
        os.close(where)


def _close(open_: list[tuple[bytes, int, str, os.stat_result]]) -> None:
    """The innermost folder is done (everything in it written): its owner, mode and mtime, set last."""
    _, fd, name, st = open_.pop()
    if open_:
        _dress(name, open_[-1][1], st)
    else:
        os.chown(fd, st.st_uid, st.st_gid)
        os.fchmod(fd, stat.S_IMODE(st.st_mode))
        os.utime(fd, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.close(fd)


def _copy_file(name: str, fd: int, out: int) -> None:
    source = os.open(name, os.O_RDONLY, dir_fd=fd)
    target = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600, dir_fd=out)
    with os.fdopen(source, "rb") as reading, os.fdopen(target, "wb") as writing:
        shutil.copyfileobj(reading, writing)


def _user_xattrs(fd: int, name: str) -> dict[str, bytes]:
    at = f"/proc/self/fd/{fd}/{name}"  # the xattr calls take no dir_fd
    try:
        found = os.listxattr(at, follow_symlinks=False)
    except OSError:  # a filesystem without them (zfs-fuse)
        return {}
    return {n: os.getxattr(at, n, follow_symlinks=False) for n in sorted(found) if n.startswith("user.")}


def _dress(name: str, out: int, st: os.stat_result, xattrs: dict[str, bytes] | None = None) -> None:
    for key, value in (xattrs or {}).items():
        os.setxattr(f"/proc/self/fd/{out}/{name}", key, value, follow_symlinks=False)
    os.chown(name, st.st_uid, st.st_gid, dir_fd=out, follow_symlinks=False)
    if not stat.S_ISLNK(st.st_mode):
        os.chmod(name, stat.S_IMODE(st.st_mode), dir_fd=out)
    os.utime(name, ns=(st.st_atime_ns, st.st_mtime_ns), dir_fd=out, follow_symlinks=False)
