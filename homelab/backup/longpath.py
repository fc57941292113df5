"""Paths longer than PATH_MAX: a folder can be made deeper than 4,096 bytes by relative calls (mkdir and
chdir step by step, or mkdirat), and then no system call given the whole path reaches anything inside it.

homelab reaches such a path through a short one to the same file:
- in this process (scan, restore, drill), `/proc/self/fd/N/NAME`, N the folder holding it opened part by
  part with openat (`short`), for as long as the `with` block runs;
- for rclone, another process, a chain of symlinks in a scratch folder (`Hops`), each body shorter than
  PATH_MAX: the kernel follows them one part of the path at a time (at most MAX_HOPS of them: the kernel
  follows 40 symlinks per lookup, so a path up to about 150 KB).
Paths that fit are used as they are: nothing changes (or costs more) for them.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from homelab.errors import HomelabError

PATH_MAX = 4096  # bytes, the terminating NUL included (linux/limits.h)
BODY = 3800  # the most a hop's symlink body holds: below PATH_MAX, with room for the remote's own path
MAX_HOPS = 38  # 40 symlinks per lookup (MAXSYMLINKS), less the staged symlink itself and one spare
_MISSING = Path("/proc/self/fd/-1")  # a folder on the way is missing: a path that does not exist


NAME_MAX = 255


def is_long(path: str | Path, room: int = 0) -> bool:
    """Too long for a system call (with `room` bytes more: a folder whose entries are to be reached)."""
    return len(os.fsencode(path)) + room >= PATH_MAX


def shown(path: str | Path, keep: int = 120) -> str:
    """A path for a message: a long one as its start and end, with its length."""
    text = os.fsdecode(path)
    if len(text) <= 2 * keep:
        return text
    return f"{text[:keep]}...{text[-keep:]} ({len(os.fsencode(path))} bytes)"


def open_folder(folder: Path, *, create: bool = False) -> int:
    """A descriptor of `folder`, of any length: its longest prefix a call can take, then part by part.
    `create`: folders missing on the way are made (as `mkdir -p`)."""
    parts = folder.parts
    n = _fitting(parts, PATH_MAX - 1)
    start = Path(*parts[:n])
    if create:
        start.mkdir(parents=True, exist_ok=True)
    fd = os.open(start, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in parts[n:]:
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, dir_fd=fd)
            inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
    except BaseException:
        os.close(fd)
        raise
    return fd


def _fitting(parts: tuple[str, ...], most: int) -> int:
    """How many of parts (the first a folder, the others names in it) join into a path of at most `most`
    bytes - at least one: counted part by part, not by joining them again for each count."""
    size = len(os.fsencode(parts[0]))
    for n, part in enumerate(parts[1:], start=1):
        size += (not parts[0].endswith("/") or n > 1) + len(os.fsencode(part))
        if size > most:
            return n
    return len(parts)


@contextlib.contextmanager
def short(path: Path, *, create: bool = False, inside: bool = False) -> Iterator[Path]:
    """`path`, or where it is too long for a system call, the same file as `/proc/self/fd/N/NAME`; a folder
    on the way that is missing (or not a folder) makes it a path that does not exist. `create`: the
    folders on the way are made; `inside`: path is a folder whose entries are to be reached too."""
    if not is_long(path, 1 + NAME_MAX if inside else 0):
        yield path
        return
    try:
        fd = open_folder(path.parent, create=create)
    except (FileNotFoundError, NotADirectoryError):
        yield _MISSING / path.name
        return
    try:
        yield Path(f"/proc/self/fd/{fd}") / path.name
    finally:
        os.close(fd)


class Hops:
    """Symlinks in `folder` leading, together, to paths of any length; each body is shorter than PATH_MAX.

    To reach `/a/.../x/y/.../z/file`: hop 0 -> `/a/.../x` (the longest start that fits), hop 1 ->
    `<folder>/0/y/...` and so on; the path is then `<folder>/<last hop>/file`. A hop made for one path is
    used again for every other that shares its start."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.made: dict[tuple[str, ...], Path] = {}  # by the folders they lead to

    def to(self, path: Path, name: str = "") -> Path:
        """A path shorter than PATH_MAX to the same file as `path` (which may hold no `..`); `name`: what to
        call it in the error raised when it is too deep."""
        if not is_long(path):
            return path
        return self._folder(path.parent.parts, name or str(path)) / path.name

    def _folder(self, parts: tuple[str, ...], name: str) -> Path:
        if parts in self.made:  # the files of one folder
            return self.made[parts]
        n = _fitting(parts, BODY - NAME_MAX - 1)  # room for one more part
        base, hops = Path(*parts[:n]), 0
        while n < len(parts):
            end = n + _fitting((str(base), *parts[n:]), BODY) - 1
            hops += 1
            if hops > MAX_HOPS:
                raise HomelabError(f"{shown(name)}: too deep to be read by rclone (more than {MAX_HOPS} symlinks)")
            hop = self.made.get(parts[:end])
            if hop is None:
                self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
                hop = self.folder / str(len(self.made))
                hop.symlink_to(base.joinpath(*parts[n:end]))
                self.made[parts[:end]] = hop
            base, n = hop, end
        return base
