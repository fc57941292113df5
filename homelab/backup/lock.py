"""Which datasets a backup run holds right now, readable by other code (an upgrade refuses to touch a dataset a
backup is reading): `<state dir>/running/<dataset, "/" as "%">.lock`, one per dataset of the run, holding
`{"pid", "run", "dataset"}` as JSON, created at the run's start and removed at its end.

Each file is flock'ed (exclusive) by the run for as long as it lives, and only shown under its name once
locked (written under a temporary name, locked, then renamed). The kernel drops the locks of a process that
died (kill -9, power loss), so a file a dead run left behind is unlocked and never counts as running: the
lock, not the file's presence nor its pid (which may have been reused), is the truth.

Upgrades mark the datasets they may roll back the same way, in `<state dir>/upgrading/` (homelab.upgrade.run):
a backup run waits while one of its datasets is marked (`wait_for_upgrades`), an upgrade refuses while a
backup holds one. Each side marks first and looks at the other's marks after, so two starting at once
never both go on.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from homelab.backup.context import BackupError

FOLDER = "running"
UPGRADES = "upgrading"  # the marks of upgrades and rollbacks
SUFFIX = ".lock"
UPGRADE_POLL = 1.0
UPGRADE_WAIT = 3 * 3600  # a backup waits this long at most for an upgrade of its datasets


def _path(state_dir: Path, dataset: str, kind: str = FOLDER) -> Path:
    return state_dir / kind / (dataset.replace("/", "%") + SUFFIX)  # "%" is not allowed in ZFS names


@contextlib.contextmanager
def holding(state_dir: Path, datasets: Iterable[str], run: str, kind: str = FOLDER) -> Iterator[None]:
    """Mark `datasets` (ZFS names) as held by this process's run `run` until the block ends."""
    folder = state_dir / kind
    folder.mkdir(mode=0o755, parents=True, exist_ok=True)  # dataset names only: readable by monitoring
    held: list[tuple[Path, int]] = []
    try:
        for name in datasets:
            final = _path(state_dir, name, kind)
            tmp = final.with_name(f".{os.getpid()}-{final.name}")
            fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
            fcntl.flock(fd, fcntl.LOCK_EX)  # a fresh file of ours: nobody else holds it
            os.write(fd, json.dumps({"pid": os.getpid(), "run": run, "dataset": name}).encode() + b"\n")
            tmp.replace(final)  # the inode, and so the lock, keeps its name from here on
            held.append((final, fd))
        yield
    finally:
        for path, fd in held:
            path.unlink(missing_ok=True)  # still locked: a reader sees it held, or gone
            os.close(fd)


def running_datasets(state_dir: Path, kind: str = FOLDER) -> set[str]:
    """The ZFS datasets a live backup run (or upgrade, with kind=UPGRADES) holds. Read-only (a shared lock
    taken and dropped at once); a file left by a dead run is ignored."""
    folder = Path(state_dir) / kind
    if not folder.is_dir():
        return set()
    held = set()
    for path in folder.glob("*" + SUFFIX):
        if path.name.startswith("."):
            continue
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            continue  # that run just ended
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            held.add(path.name.removesuffix(SUFFIX).replace("%", "/"))
        else:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
    return held


def wait_for_upgrades(state_dir: Path, datasets: Iterable[str], say: Callable[[str], None]) -> None:
    """Return once no upgrade or rollback holds one of `datasets` (call while holding them: a new upgrade
    then refuses); after UPGRADE_WAIT, refuse."""
    wanted = set(datasets)
    deadline = time.monotonic() + UPGRADE_WAIT
    busy = running_datasets(state_dir, UPGRADES) & wanted
    if busy:
        say(f"waiting for the upgrade of {', '.join(sorted(busy))} to end")
    while busy:
        if time.monotonic() > deadline:
            raise BackupError(f"an upgrade still holds {', '.join(sorted(busy))}; backup not run")
        time.sleep(UPGRADE_POLL)
        busy = running_datasets(state_dir, UPGRADES) & wanted
