"""Undoing upgrades: the automatic rollback, `homelab rollback STACK`, and the retention of upgrade snapshots
(the next `up` finishing what a killed `homelab` left half done is homelab.upgrade.settle).

A rollback checks first that it can be done (every dataset still has the upgrade's snapshot) and, when the
version it undoes served, what it would discard; only then does it stop the stack. The data step
(homelab.upgrade.restore) keeps what it discards in a safety snapshot and destroys no snapshot; once it is
done the journal says so (`data_restored`), and finishing an interrupted rollback never puts the data back
a second time: what the previous version wrote since stays.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import yaml

from homelab.engine.health import ApplyFailed, wait_healthy
from homelab.engine.model import StackPlan
from homelab.errors import CommandFailed, HomelabError
from homelab.layout import COMPOSE_FILE
from homelab.ownership import write_owned
from homelab.runtime.docker import Engine
from homelab.runtime.zfs import Zfs
from homelab.upgrade.journal import (
    INTERRUPTED,
    RECORDS_DIR,
    Record,
    RolledBack,
    UpgradeRefused,
    checkpoint,
    list_records,
    process_started,
)
from homelab.upgrade.restore import changes, keeps_data, measure, put_back, room, safety_name

KEEP = 3  # upgrade snapshots kept per stack; older ones are destroyed after a successful upgrade
LOG_LINES = 200  # of each failed container's output, kept in the record
CRASH_LINES = 5  # of an exited container's output, in the failure message
# Go durations as compose writes them (1m30s, 500ms); docker's defaults when a healthcheck leaves one out
DURATION = re.compile(r"(\d+(?:\.\d+)?)(h|ms|m|s|us|ns)")
UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}
HEALTH_DEFAULTS = {"interval": 30.0, "retries": 3, "start_period": 0.0}

Decide = Callable[[str], bool]  # shown what a rollback would discard: go on?


@contextmanager
def marked(marks: Path | None, datasets: Iterable[str], what: str) -> Iterator[None]:
    """Mark the datasets as being upgraded or rolled back in the backup state folder `marks`
    (homelab.backup.lock; None: no marks), then refuse if a backup run holds one: each side marks before
    looking at the other's marks, so a backup and an upgrade starting together never both go on (the
    backup waits for ours to go)."""
    if marks is None:
        yield
        return
    from homelab.backup.lock import UPGRADES, holding, running_datasets

    with holding(marks, datasets, what, UPGRADES):
        busy = running_datasets(marks) & set(datasets)
        if busy:
            raise UpgradeRefused(
                f"{what}: a backup run is reading {', '.join(sorted(busy))}; nothing was changed, "
                "try again when it ends"
            )
        yield


def keep_logs(record: Record, out: Path, docker: Engine) -> tuple[Path, list[str]]:
    """The failed version's output, kept in the record's folder; for each container that exited (or
    restarts), its exit code and last lines: a version that crashes at once has no health output."""
    folder = out / RECORDS_DIR / record.folder_name
    crashed = []
    for c in docker.containers([StackPlan(record.stack, out / record.stack).project]):
        text = docker.logs_tail(c.id, LOG_LINES)
        (folder / f"{c.service}.log").write_text(text + "\n", encoding="utf-8")
        if c.state in ("exited", "dead", "restarting") or c.restart_count:
            tail = " | ".join(line.strip() for line in text.splitlines()[-CRASH_LINES:]) or "(no output)"
            code = "" if c.running else f" with code {c.exit_code}"  # a restarted one runs: its code is gone
            again = f" (restarted {c.restart_count} times)" if c.restart_count else ""
            crashed.append(f"{c.service} exited{code}{again}; last output: {tail}")
    return folder, crashed


def roll_back(
    record: Record,
    out: Path,
    docker: Engine,
    zfs: Zfs,
    timeout: float,
    progress: Callable[[str], None],
    failure: ApplyFailed,
) -> RolledBack:
    """A failed upgrade undone (the version never passed the gate: nothing asked; what it wrote is kept in
    a safety snapshot): logs kept, restore, "rolled-back"; returns the error that says so, first what
    crashed (the gate's verdict on a crashed service, "no health output", says nothing), then the gate."""
    folder, crashed = keep_logs(record, out, docker)
    why = [*crashed, *(line.strip() for line in str(failure).splitlines())]
    progress(f"{record.stack}: upgrade failed, rolling back ({why[0]})")
    record.notes.append("\n".join(why))
    restore(record, out, docker, zfs, timeout, progress)
    record.step(out, "rolled-back")
    data = "its data from before the upgrade" if record.snapshot else "the data as the new version left it"
    lines = [
        f"{record.stack}: upgrade rolled back: {why[0]}",
        *(f"  {line}" for line in why[1:]),
        f"  the previous version runs again on {data}",
        f"  the failed version's logs: {folder}",
    ]
    if record.safety:
        lines.append(f"  what it wrote is kept in the safety snapshot @{record.safety}")
    return RolledBack("\n".join(lines))


@contextmanager
def gated(
    record: Record, out: Path, docker: Engine, zfs: Zfs, timeout: float, progress: Callable[[str], None]
) -> Iterator[None]:
    """Around the new version's compose up and health gate, in an upgrade and in finishing one a killed
    `homelab` left: the gate failed (ApplyFailed) is rolled back (RolledBack raised); passed is `upgraded`."""
    try:
        yield
    except ApplyFailed as failure:
        raise roll_back(record, out, docker, zfs, timeout, progress, failure) from None
    upgraded(record, out, zfs, progress)


def abandon(record: Record, out: Path, zfs: Zfs, why: str) -> None:
    """An upgrade stopped before the stack was touched: its snapshots (of data nothing changed since)
    are destroyed, so the next try starts clean."""
    for name in record.datasets if record.snapshot else ():
        if record.snapshot in zfs.snapshots(name):
            zfs.destroy(f"{name}@{record.snapshot}")
    record.snapshot = None
    record.notes.append(why)
    record.step(out, "abandoned")


def upgraded(record: Record, out: Path, zfs: Zfs, progress: Callable[[str], None]) -> None:
    """The new version passed the gate: from now on it serves, and undoing it asks first."""
    record.healthy_at = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    record.step(out, "upgraded")
    prune(out, zfs, record.stack, progress)


def refuse(_loss: str) -> bool:
    """What `decide` answers where nobody can be asked: no."""
    return False


def refuse_if_alive(record: Record) -> None:
    if record.pid != os.getpid() and record.started and process_started(record.pid) == record.started:
        raise UpgradeRefused(
            f"{record.stack}: an upgrade is running in homelab process {record.pid}; wait for it to end"
        )


def restore(
    record: Record,
    out: Path,
    docker: Engine,
    zfs: Zfs,
    timeout: float,
    progress: Callable[[str], None],
    *,
    decide: Decide | None = None,
    keep_data: bool = False,
) -> None:
    """Check, stop the stack, put its datasets back to the snapshot (unless already done, or keep_data),
    bring the previous compose.yaml up, gate its health. With `decide`, what would be discarded is asked
    about first (UpgradeRefused, nothing touched, when the answer is no)."""
    stack = StackPlan(record.stack, out / record.stack)
    folder = out / RECORDS_DIR / record.folder_name
    data = bool(record.snapshot) and not record.data_restored and not keep_data
    if data:
        _can_put_back(record, out, docker, zfs, decide)
    record.step(out, "rolling-back")
    if data:
        docker.down(stack.project, stack.directory)
        _data_step(record, out, docker, zfs, progress)
    elif keep_data:
        progress(f"{record.stack}: keeping the data as the new version left it (--keep-data)")
    previous = (folder / COMPOSE_FILE).read_bytes()
    write_owned(out, {f"{record.stack}/{COMPOSE_FILE}": previous})
    wait = rollback_wait(previous, timeout)
    began = time.monotonic()
    try:
        docker.up(stack.project, stack.directory, timeout=wait)
    except (CommandFailed, TimeoutError) as exc:
        progress(f"{record.stack}: compose up of the previous version said: {exc}")
    checkpoint("rollback-composed")
    bad = wait_healthy(docker, stack, began + wait)
    if bad:
        raise ApplyFailed(
            f"rollback of {record.stack} unfinished: {', '.join(bad)} not healthy {wait:.0f}s after the previous "
            f"version's start (its data is back already); `homelab up {record.stack}` finishes it"
        )
    where = f"data at @{record.snapshot}" if data or record.data_restored else "the data as it was"
    progress(
        f"{record.stack}: rolled back to the previous images, {where}; healthy after {time.monotonic() - began:.1f}s"
    )


def _can_put_back(record: Record, out: Path, docker: Engine, zfs: Zfs, decide: Decide | None) -> None:
    """Before anything stops: the snapshot is on every dataset, there is room to take the files back, and
    (with `decide`) what would be discarded is accepted; else UpgradeRefused."""
    missing = [n for n in record.datasets if record.snapshot not in zfs.snapshots(n)]
    if missing:
        raise UpgradeRefused(f"{record.stack}: snapshot @{record.snapshot} is gone from {', '.join(missing)}")
    base = out / RECORDS_DIR / record.folder_name / "read"
    found = [changes(zfs, name, record.snapshot or "", base) for name in record.datasets]
    short = room(zfs, found)
    if short:
        raise UpgradeRefused(f"rollback of {record.stack} not done, nothing was stopped: " + "; ".join(short))
    if decide is None:
        return
    loss = measure(record, out, docker, zfs, found)
    if loss.changed and not decide(loss.describe()):
        what = "unfinished: it" if record.state == "rolling-back" else "not done: it"
        raise UpgradeRefused(
            f"rollback of {record.stack} {what} would discard what was written since the upgrade "
            f"(@{record.snapshot}):\n{loss.describe()}\n"
            f"`homelab rollback {record.stack} --discard-writes` rolls back keeping it in a safety snapshot; "
            f"`homelab rollback {record.stack} --keep-data` returns to the previous images on the data as it is"
        )


def _data_step(record: Record, out: Path, docker: Engine, zfs: Zfs, progress: Callable[[str], None]) -> None:
    """The stack is down: keep what would be discarded (safety snapshot), then put the data back. A failure
    before any file was put back brings the stack up again as it was."""
    stack = StackPlan(record.stack, out / record.stack)
    base = out / RECORDS_DIR / record.folder_name / "read"
    snapshot = record.snapshot or ""
    try:
        found = [changes(zfs, name, snapshot, base) for name in record.datasets]
        changed = [c for c in found if c.any]
        if changed:
            record.safety = record.safety or _unused(zfs, record, safety_name(record.stack))
            record.save(out)
            for c in changed:
                if record.safety not in zfs.snapshots(c.dataset):
                    zfs.snapshot(c.dataset, record.safety)
            progress(
                f"{record.stack}: safety snapshot @{record.safety} keeps what the rollback discards: "
                + "; ".join(c.describe() for c in changed)
            )
    except (CommandFailed, OSError, HomelabError) as exc:
        docker.up(stack.project, stack.directory, timeout=300)
        if record.served:  # nothing happened: the upgrade stands, `homelab rollback` may try again
            record.step(out, "upgraded")
        raise HomelabError(
            f"rollback of {record.stack} not done: {exc}\n  nothing was put back; the stack runs again as it was"
        ) from None
    for name in record.datasets:
        snaps = zfs.snapshots(name)
        newer = snaps[snaps.index(snapshot) + 1 :]
        if newer:
            progress(f"{name}: newer snapshots kept (none destroyed): {', '.join('@' + s for s in newer)}")
    for c in changed:
        put_back(zfs, c.dataset, snapshot, base)
    record.data_restored = True
    record.save(out)


def _unused(zfs: Zfs, record: Record, name: str) -> str:
    """`name`, or `name-N` when a rollback of the same second took it (each must keep its own state)."""
    taken = {s for d in record.datasets for s in zfs.snapshots(d)}
    unique, n = name, 0
    while unique in taken:
        n += 1
        unique = f"{name}-{n}"
    return unique


def rollback_wait(compose: bytes, timeout: float) -> float:
    """How long the previous version may take to turn healthy: `timeout`, or longer when a service's
    healthcheck allows more (start_period plus its retries, docker's defaults for what it leaves out)."""
    services = (yaml.safe_load(compose) or {}).get("services") or {}
    longest = 0.0
    for service in services.values():
        check = (service or {}).get("healthcheck") or {}
        if not check or check.get("disable"):
            continue
        interval = _seconds(check.get("interval"), HEALTH_DEFAULTS["interval"])
        start = _seconds(check.get("start_period"), HEALTH_DEFAULTS["start_period"])
        retries = int(check.get("retries", HEALTH_DEFAULTS["retries"]))
        longest = max(longest, start + interval * (retries + 1))
    return max(timeout, longest)


def _seconds(value: object, default: float) -> float:
    if value is None:
        return default
    parts = DURATION.findall(str(value))
    return sum(float(n) * UNITS[unit] for n, unit in parts) if parts else default


def rollback(
    out: Path,
    docker: Engine,
    zfs: Zfs,
    stack: str,
    *,
    timeout: float,
    progress: Callable[[str], None],
    decide: Decide = refuse,
    keep_data: bool = False,
    marks: Path | None = None,
) -> Record:
    """`homelab rollback STACK`: finish the stack's interrupted rollback, else undo its last upgrade while its
    snapshot exists (one upgrade further back each time). The version served: what would be discarded is
    put to `decide` first. `marks`: the backup state folder, where the datasets are marked meanwhile."""
    records = list_records(out, stack)
    interrupted = [r for r in records if r.state in INTERRUPTED]
    if interrupted and interrupted[-1].state != "rolling-back":
        raise UpgradeRefused(f"{stack}: an upgrade of it was interrupted; `homelab up` finishes or undoes it first")
    if interrupted:
        record = interrupted[-1]
        refuse_if_alive(record)
        record.notes.append("interrupted rollback finished by `homelab rollback`")
    else:
        done = [r for r in records if r.state == "upgraded"]
        if not done:
            raise UpgradeRefused(f"{stack}: no upgrade to roll back (homelab upgrade --list shows them)")
        record = done[-1]
        record.healthy_at = record.healthy_at or "unknown (upgraded before homelab recorded it)"
        record.notes.append("rolled back by hand" + (", keeping the data" if keep_data else ""))
    if record.snapshot is None and not keep_data:
        raise UpgradeRefused(
            f"{stack}: no snapshot of its last upgrade is left (--no-snapshot, or removed by retention); "
            "`--keep-data` returns to the previous images on the data as it is"
        )
    if keep_data:
        keeps_data(record)
    with marked(marks, record.datasets, f"rollback of {stack}"):
        restore(record, out, docker, zfs, timeout, progress, decide=decide, keep_data=keep_data)
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
