"""One writer per config folder: every command that writes (render, up, storage, backup, certs, monitor
discover...) holds `<config folder>/.homelab.lock` while it runs, so two of them never interleave their
writes into the same stacks folder, state or inventory.

The file is flock'ed: the kernel drops the lock of a process that died (kill -9), so a stale file never
blocks. It holds the holder's pid, command and start time, for the message a second writer gets after
waiting WAIT_SECONDS (exit 5). It is removed when released, so a folder only commands read stays as it
was; a writer that opened the file just before it was removed sees its inode gone and opens it again.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from homelab.errors import ExitCode, HomelabError

LOCK_NAME = ".homelab.lock"
WAIT_SECONDS = 10.0
_POLL = 0.05
log = logging.getLogger(__name__)
_held: dict[Path, int] = {}  # folder -> depth: a command nested in a group that also locks


class Busy(HomelabError):
    """Another homelab process is writing in this folder."""

    exit_code = ExitCode.REFUSED


def _holder(fd: int) -> str:
    text = os.pread(fd, 512, 0).decode("utf-8", errors="replace").strip()
    return text or "a homelab process that is starting"


def _open_locked(path: Path, deadline: float) -> int | None:
    """An open descriptor of the lock file, flock'ed; None when it vanished under us (try again)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise Busy(
                        f"another homelab is writing in {path.parent} ({_holder(fd)}); try again when it is done"
                    ) from None
                time.sleep(_POLL)
        if os.fstat(fd).st_ino == path.lstat().st_ino:
            return fd
    except FileNotFoundError:
        pass  # released (and removed) by the holder while we waited
    except BaseException:
        _remove_if_unheld(fd, path)  # a signal while waiting or just after the flock: leave no file behind
        os.close(fd)
        raise
    os.close(fd)
    return None


def _remove_if_unheld(fd: int, path: Path) -> None:
    """Remove the lock file `fd` opened when no other process holds it (this one may: flock is per open
    file, so LOCK_NB succeeds again); a waiter that opened it sees its inode gone and opens it again."""
    with contextlib.suppress(OSError):
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if os.fstat(fd).st_ino == path.lstat().st_ino:
            path.unlink()


@contextlib.contextmanager
def holding(folder: Path, command: str, wait: float | None = None) -> Iterator[None]:
    """Hold the folder's lock for the block; wait up to `wait` (WAIT_SECONDS) seconds for another holder,
    else Busy."""
    folder = folder.resolve()
    if folder in _held:
        _held[folder] += 1
        try:
            yield
        finally:
            _held[folder] -= 1
        return
    path = folder / LOCK_NAME
    deadline = time.monotonic() + (WAIT_SECONDS if wait is None else wait)
    fd = None
    try:  # one try from the first open: a signal anywhere after it still removes the file
        try:
            while fd is None:
                fd = _open_locked(path, deadline)
        except OSError as exc:
            # no folder (the load reports it) or one this user may not write in: nothing of ours to protect
            log.info("not locking %s: %s", folder, exc.strerror or exc)
        if fd is None:
            yield
            return
        _held[folder] = 1
        started = datetime.now(UTC).isoformat(timespec="seconds")
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()}: homelab {command}, since {started}\n".encode(), 0)
        yield
    finally:
        if fd is not None:
            _held.pop(folder, None)
            with contextlib.suppress(OSError):
                path.unlink()  # before the unlock: a waiter that then gets the old inode sees it gone
            os.close(fd)
