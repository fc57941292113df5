"""Open a file homelab reads (the config, the sensor inventory, secret files, its own earlier output): the
one way to do it, so every reader refuses the same hostile states with the same clear words.

- only a regular file is opened: a FIFO would block the read forever, a device could be endless;
- its size is checked before reading and the read stops at the limit, so a huge file is never read whole;
- a symbolic link loop, a file the user may not read and a folder where a file goes are each named as such.

Failures raise Unreadable, whose `reason` never holds the path (a secret's path may itself be sensitive):
each caller says which file it was, in its own error kind.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Literal

from homelab.errors import ExitCode, HomelabError

KIB = 1024
MIB = 1024 * KIB

_KINDS = {
    stat.S_IFIFO: "a named pipe (FIFO)",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFDIR: "a folder",
}
_REASONS = {
    errno.ENOENT: "no such file",
    errno.ELOOP: "a symbolic link loop",
    errno.EACCES: "permission denied: the current user may not read it",
    errno.EPERM: "permission denied: the current user may not read it",
    errno.ENOTDIR: "a part of the path is not a folder",
    errno.ENAMETOOLONG: "the path is too long",
}


Kind = Literal["missing", "special", "too_large", "other"]  # special: not a regular file


class Unreadable(HomelabError):
    """A file homelab needs cannot be read as a regular file; `reason` says why, without the path."""

    exit_code = ExitCode.USAGE  # bad input: nothing was changed

    def __init__(self, path: Path, reason: str, kind: Kind = "other"):
        self.path = path
        self.reason = reason
        self.kind = kind
        super().__init__(f"cannot read {path}: {reason}")


def _reason(exc: OSError) -> str:
    return _REASONS.get(exc.errno or 0, exc.strerror or type(exc).__name__)


def describe(mode: int) -> str:
    """What a non-regular file is, for a message: `a named pipe (FIFO)`, `a folder`..."""
    return _KINDS.get(stat.S_IFMT(mode), "not a regular file")


def read_bytes(path: Path, limit: int) -> bytes:
    """The whole content of the regular file at `path`, at most `limit` bytes (else Unreadable)."""
    try:
        before = path.stat()
        if not stat.S_ISREG(before.st_mode):
            raise Unreadable(path, f"it is {describe(before.st_mode)}, not a regular file", "special")
        if before.st_size > limit:
            raise Unreadable(path, f"it is larger than {_size(limit)}", "too_large")
        # O_NONBLOCK: should a FIFO have replaced the file since the check, opening it still returns at once
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        missing = exc.errno in (errno.ENOENT, errno.ENOTDIR)  # nothing there, or a file where a folder goes
        raise Unreadable(path, _reason(exc), "missing" if missing else "other") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise Unreadable(path, "it is not a regular file", "special")
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(limit + 1 - size, MIB))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise Unreadable(path, _reason(exc)) from None
    finally:
        os.close(fd)
    if size > limit:  # it grew after the check
        raise Unreadable(path, f"it is larger than {_size(limit)}", "too_large")
    return b"".join(chunks)


def read_if_exists(path: Path, limit: int) -> bytes | None:
    """read_bytes, or None when nothing is there (no file, or a file where a parent folder goes)."""
    try:
        return read_bytes(path, limit)
    except Unreadable as exc:
        if exc.kind == "missing":
            return None
        raise


def _size(limit: int) -> str:
    return f"{limit // MIB} MiB" if limit >= MIB and limit % MIB == 0 else f"{limit // KIB} KiB"
