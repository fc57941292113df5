"""cryptcheck the objects a sync has finished writing while it writes the others.

Each batch is what was written since the previous batch started, so on a slow uplink the check costs no
wall time, and the last batch is small. `finish` checks the rest and returns the merged result.
"""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from homelab.runtime.rclone import CheckResult, CopiedFn, ProgressFn, RcloneDriver, Result

CHECK_BATCH_FILES = 2000  # objects written before a check batch starts...
CHECK_BATCH_WAIT = 2.0  # ...or seconds since the first of them was written


@dataclass(frozen=True)
class Part:
    """What one sync of a dataset reads and writes: the snapshot (the names the remote cannot hold left out),
    or the folder of derived-name objects (homelab.backup.names), read through its symlinks."""

    source: Path
    dst: str
    archive: str  # the sync's --backup-dir
    skip: tuple[str, ...] = ()
    follow_links: bool = False

    def sync(
        self, rclone: RcloneDriver, label: str, progress: ProgressFn | None = None, on_copied: CopiedFn | None = None
    ) -> Result:
        """`rclone sync` of the part, what it replaces or deletes kept in its archive."""
        return rclone.sync(
            self.source,
            self.dst,
            backup_dir=self.archive,
            label=label,
            progress=progress,
            on_copied=on_copied,
            skip=self.skip,
            follow_links=self.follow_links,
        )

    def check(self, rclone: RcloneDriver, label: str, files: list[str] | None = None) -> CheckResult:
        skip = self.skip if files is None else ()  # a list of written objects holds none of them
        return rclone.cryptcheck(
            self.source, self.dst, label=label, files=files, skip=skip, follow_links=self.follow_links
        )


def absorb_part(into: CheckResult, checked: CheckResult, prefix: str) -> None:
    """Add a part's check, its object names made relative to the dataset's folder on the remote."""
    if prefix:
        for found in (checked.differ, checked.missing, checked.extra):
            found[:] = [f"{prefix}/{name}" for name in found]
    into.absorb(checked)


class CheckAsWritten:
    def __init__(self, rclone: RcloneDriver, part: Part, label: str, wait: float | None = None):
        self.rclone, self.part, self.label = rclone, part, label
        self.wait = CHECK_BATCH_WAIT if wait is None else wait
        self.result = CheckResult()
        self._pending: list[str] = []
        self._seen: set[str] = set()
        self._finished = False
        self._ready = threading.Condition()
        self._worker = threading.Thread(target=self._work, daemon=True)
        self._worker.start()

    def add(self, name: str) -> None:
        with self._ready:
            if name not in self._seen:
                self._seen.add(name)
                self._pending.append(name)
                self._ready.notify()

    def finish(self, written: list[str]) -> CheckResult:
        for name in written:  # the sync's own log, read whole: nothing the tail missed goes unchecked
            self.add(name)
        with self._ready:
            self._finished = True
            self._ready.notify()
        self._worker.join()
        return self.result

    def _next_batch(self) -> list[str]:
        with self._ready:
            while not self._pending and not self._finished:
                self._ready.wait()
            # each cryptcheck costs a start-up and a listing: wait for a batch worth it, but not long
            deadline = time.monotonic() + self.wait
            while not self._finished and len(self._pending) < CHECK_BATCH_FILES:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._ready.wait(left)
            batch, self._pending = self._pending, []
            return batch

    def _work(self) -> None:
        for n in itertools.count(1):
            batch = self._next_batch()
            if not batch:
                return
            try:
                checked = self.part.check(self.rclone, f"{self.label}-check-{n}", batch)
                self.result.absorb(checked)
            except Exception as exc:  # reported as a check error, never lost in the thread
                self.result.errors.append(f"cryptcheck could not run: {exc}")
