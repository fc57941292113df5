"""Undoing upgrades: the automatic rollback, `homelab rollback STACK`, the recovery of an upgrade a killed
`homelab` left half done, and the retention of upgrade snapshots."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from homelab.engine.compose import up_healthy
from homelab.engine.health import ApplyFailed, wait_healthy
from homelab.engine.model import StackPlan
from homelab.layout import COMPOSE_FILE
from homelab.ownership import write_owned
from homelab.runtime.docker import Engine
from homelab.runtime.zfs import Zfs
from homelab.upgrade_journal import (
    INTERRUPTED,
    RECORDS_DIR,
    Record,
    RolledBack,
    UpgradeRefused,
    list_records,
    process_started,
)

KEEP = 3  # upgrade snapshots kept per stack; older ones are destroyed after a successful upgrade
LOG_LINES = 200  # of each failed container's output, kept in the record


def keep_logs(record: Record, out: Path, docker: Engine) -> Path:
    """The failed version's output, kept in the record's folder."""
    folder = out / RECORDS_DIR / record.folder_name
    for c in docker.containers([StackPlan(record.stack, out / record.stack).project]):
        (folder / f"{c.service}.log").write_text(docker.logs_tail(c.id, LOG_LINES) + "\n", encoding="utf-8")
    return folder


def roll_back(
    record: Record,
    out: Path,
    docker: Engine,
    zfs: Zfs,
    timeout: float,
    progress: Callable[[str], None],
    failure: ApplyFailed,
) -> RolledBack:
    """A failed upgrade undone: logs kept, journal at "rolling-back", restore, "rolled-back"; returns the
    error that says so."""
    folder = keep_logs(record, out, docker)
    progress(f"{record.stack}: upgrade failed, rolling back ({failure})")
    record.notes.append(str(failure))
    record.step(out, "rolling-back")
    restore(record, out, docker, zfs, timeout, progress)
    record.step(out, "rolled-back")
    data = "its data from before the upgrade" if record.snapshot else "the data as the new version left it"
    return RolledBack(
        f"{record.stack}: the upgrade did not become healthy and was rolled back; the previous "
        f"version runs again on {data}\n{failure}\n"
        f"  the failed version's logs: {folder}"
    )


def abandon(record: Record, out: Path, zfs: Zfs, why: str) -> None:
    """An upgrade stopped before the stack was touched: its snapshots (of data nothing changed since)
    are destroyed, so the next try starts clean."""
    for name in record.datasets if record.snapshot else ():
        if record.snapshot in zfs.snapshots(name):
            zfs.destroy(f"{name}@{record.snapshot}")
    record.snapshot = None
    record.notes.append(why)
    record.step(out, "abandoned")


def recover(out: Path, docker: Engine, zfs: Zfs, *, timeout: float, progress: Callable[[str], None]) -> list[Record]:
    """Finish or undo every upgrade a killed `homelab` left in the journal, before `up` does anything else:
    - "snapshotting": the stack was not touched: its snapshots are destroyed ("abandoned"); `up` then
      upgrades afresh;
    - "applying": compose up of the stack as rendered and the health gate, as the killed run would
      have: healthy is "upgraded", else rolled back;
    - "rolling-back": the rollback is done again from the start (each step of it is idempotent).
    Raises RolledBack after the others are settled when one was rolled back (the killed `up` would have
    stopped there too); UpgradeRefused when the homelab running an upgrade is still alive."""
    settled, failures = [], []
    for record in list_records(out):
        if record.state not in INTERRUPTED:
            continue
        if record.pid != os.getpid() and record.started and process_started(record.pid) == record.started:
            raise UpgradeRefused(
                f"{record.stack}: an upgrade is running in homelab process {record.pid}; wait for it to end"
            )
        progress(f"{record.stack}: the upgrade of {record.stamp} was interrupted while {record.state}")
        if record.state == "snapshotting":
            abandon(record, out, zfs, "interrupted before the stack was touched; its snapshots were removed")
            progress(f"{record.stack}: nothing was changed yet; the upgrade starts over")
        elif record.state == "applying":
            try:
                up_healthy(docker, StackPlan(record.stack, out / record.stack), timeout, [], progress)
            except ApplyFailed as failure:
                failures.append(roll_back(record, out, docker, zfs, timeout, progress, failure))
            else:
                record.notes.append("finished by the next up after an interrupted one")
                record.step(out, "upgraded")
                progress(f"{record.stack}: the interrupted upgrade is finished and healthy")
                prune(out, zfs, record.stack, progress)
        else:
            record.notes.append("rollback finished by the next up after an interrupted one")
            restore(record, out, docker, zfs, timeout, progress)
            record.step(out, "rolled-back")
            failures.append(RolledBack(f"{record.stack}: the interrupted rollback of {record.stamp} is finished"))
        settled.append(record)
    if failures:
        raise RolledBack("\n".join(str(f) for f in failures))
    return settled


def restore(
    record: Record, out: Path, docker: Engine, zfs: Zfs, timeout: float, progress: Callable[[str], None]
) -> None:
    """Stop the stack, roll its datasets back (when the upgrade has a snapshot), bring the previous
    compose.yaml up, gate its health."""
    stack = StackPlan(record.stack, out / record.stack)
    folder = out / RECORDS_DIR / record.folder_name
    docker.down(stack.project, stack.directory)
    for name in record.datasets if record.snapshot else ():
        zfs.rollback(f"{name}@{record.snapshot}")
    write_owned(out, {f"{record.stack}/{COMPOSE_FILE}": (folder / COMPOSE_FILE).read_bytes()})
    began = time.monotonic()
    docker.up(stack.project, stack.directory, timeout=timeout)
    bad = wait_healthy(docker, stack, began + timeout)
    if bad:
        raise ApplyFailed(f"stack {record.stack}: still not healthy after the rollback: {', '.join(bad)}")
    data = f"data at @{record.snapshot}" if record.snapshot else "data left as the new version wrote it"
    progress(
        f"{record.stack}: rolled back to the previous images, {data}; healthy after {time.monotonic() - began:.1f}s"
    )


def rollback(
    out: Path, docker: Engine, zfs: Zfs, stack: str, *, timeout: float, progress: Callable[[str], None]
) -> Record:
    """`homelab rollback STACK`: undo the stack's last upgrade while its snapshot exists."""
    records = list_records(out, stack)
    if any(r.state in INTERRUPTED for r in records):
        raise UpgradeRefused(f"{stack}: an upgrade of it was interrupted; `homelab up` finishes or undoes it first")
    done = [r for r in records if r.state == "upgraded"]
    if not done:
        raise UpgradeRefused(f"{stack}: no upgrade to roll back (homelab upgrade --list shows them)")
    record = done[-1]
    if record.snapshot is None:
        raise UpgradeRefused(
            f"{stack}: no snapshot of its last upgrade is left (--no-snapshot, or removed by retention)"
        )
    missing = [n for n in record.datasets if record.snapshot not in zfs.snapshots(n)]
    if missing:
        raise UpgradeRefused(f"{stack}: snapshot @{record.snapshot} is gone from {', '.join(missing)}")
    record.notes.append("rolled back by hand")
    record.step(out, "rolling-back")
    restore(record, out, docker, zfs, timeout, progress)
    record.step(out, "rolled-back")
    return record


def prune(out: Path, zfs: Zfs, stack: str, progress: Callable[[str], None]) -> None:
    """Keep the KEEP newest upgrade snapshots of a stack; destroy older ones (their records stay)."""
    kept = [r for r in list_records(out, stack) if r.snapshot is not None]
    for record in kept[:-KEEP]:
        for name in record.datasets:
            if record.snapshot in zfs.snapshots(name):
                zfs.destroy(f"{name}@{record.snapshot}")
        progress(f"{stack}: removed old upgrade snapshot @{record.snapshot}")
        record.snapshot = None
        record.notes.append(f"snapshot removed by retention (keep {KEEP})")
        record.save(out)
