"""SIGINT and SIGTERM, handled the same way in every command (docs/cli.md: exit 130 and 143).

Three phases:
- start-up (homelab/entry.py, before the command runs, and again after it is done): nothing is being
  changed, so a signal ends the process at once with one line (and, for --json, the one JSON document);
- the command (the CLI's error handler, around the outermost invoke): SIGINT raises KeyboardInterrupt and
  SIGTERM raises Terminated, so every `finally` and context manager undoes its step on the way out;
- a step that must not be cut in half (the writer's swap of the output): both signals are blocked for its
  duration and delivered when it ends, so the step finishes and the command stops right after.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from types import FrameType

HANDLED = (signal.SIGINT, signal.SIGTERM)


class Terminated(BaseException):
    """SIGTERM arrived (what systemd and Docker send). A BaseException, as KeyboardInterrupt, so that
    `except Exception` never swallows it."""


def _terminate(_signum: int, _frame: FrameType | None) -> None:
    raise Terminated


@contextlib.contextmanager
def raising() -> Iterator[None]:
    """Within: SIGINT raises KeyboardInterrupt, SIGTERM raises Terminated; the previous handlers after."""
    previous = {}
    with contextlib.suppress(ValueError):  # not the main thread (a library caller's): not ours to handle
        previous = {signum: signal.signal(signum, handler) for signum, handler in _RAISING.items()}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


_RAISING = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: _terminate}


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Within: SIGINT and SIGTERM wait (blocked, not lost); they act as soon as the block ends."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, HANDLED)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
