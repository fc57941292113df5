"""Upgrades you can undo: a snapshot before an app's image changes, a rollback when it does not come up.

When `up` would give a stack's service another image (a new catalog pin, an `images:` override, or the
same tag now naming another image), the stack's datasets are snapshotted (`@homelab-upgrade-<stack>-<stamp>`)
and its previous compose.yaml is kept, before the stack is touched. If the health gate then fails, the
stack is taken down, its datasets are rolled back to that snapshot, the previous compose.yaml is put back
and brought up, and the gate runs again; the failed version's logs are kept next to the record.
`homelab rollback STACK` does the same by hand. Records live in `<stacks>/.homelab-upgrades/<stack>-<stamp>/`.

The unit is the stack (one compose project): its images move together and its containers are what
holds its datasets open. Postgres dumps are not taken: the snapshot is crash-consistent, which
Postgres recovers from like from a power cut (docs/upgrades.md).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

import yaml

from homelab.apply import Convergence, StackPlan
from homelab.drift import REPAIR
from homelab.errors import CommandFailed, HomelabError
from homelab.health import ApplyFailed, wait_healthy
from homelab.layout import COMPOSE_FILE
from homelab.ownership import write_owned
from homelab.plan import Plan, Stack
from homelab.runtime.docker import Engine
from homelab.runtime.zfs import Zfs, ZfsCli

RECORDS_DIR = ".homelab-upgrades"
SNAPSHOT_PREFIX = "homelab-upgrade-"
KEEP = 3  # upgrade snapshots kept per stack; older ones are destroyed after a successful upgrade
MIN_FREE = 64 << 20  # bytes free a dataset needs at least for the upgrade to write beside its snapshot
LOG_LINES = 200  # of each failed container's output, kept in the record

State = Literal["pending", "upgraded", "rolled-back"]


class UpgradeRefused(HomelabError):
    """An upgrade could not be undone (no snapshot possible), so it was not started."""

    exit_code = 2


class RolledBack(HomelabError):
    """The new version did not become healthy; the previous one runs again on its previous data."""

    exit_code = 1


@dataclass(frozen=True)
class ImageChange:
    service: str
    old: str
    new: str


@dataclass(frozen=True)
class Upgrade:
    stack: str
    changes: tuple[ImageChange, ...]
    datasets: tuple[str, ...]  # ZFS names of the datasets the stack's services mount


@dataclass
class Record:
    """One upgrade as kept on disk: what changed, which snapshot undoes it, how it ended."""

    stack: str
    stamp: str
    datasets: list[str]
    changes: list[ImageChange]
    state: State = "pending"
    snapshot: str | None = None  # the part after @; None: taken with --no-snapshot
    notes: list[str] = field(default_factory=list)

    @property
    def folder_name(self) -> str:
        return f"{self.stack}-{self.stamp}"

    def save(self, out: Path) -> Path:
        folder = out / RECORDS_DIR / self.folder_name
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / ".record.json.tmp"
        tmp.write_text(json.dumps(asdict(self), indent=1, sort_keys=True) + "\n", encoding="utf-8")
        tmp.replace(folder / "record.json")
        return folder

    @classmethod
    def load(cls, path: Path) -> Record:
        data = json.loads(path.read_text(encoding="utf-8"))
        data["changes"] = [ImageChange(**c) for c in data["changes"]]
        return cls(**data)


# --- what an `up` would upgrade ------------------------------------------------------------------


def stack_datasets(plan: Plan, stack: Stack) -> tuple[str, ...]:
    """The datasets whose folders a stack's services mount (the data an upgrade may rewrite)."""
    sources = [m.source for s in stack.services.values() for m in s.mounts]
    return tuple(
        d.name
        for d in plan.datasets
        if any(src == d.path or src.startswith(d.path.rstrip("/") + "/") for src in sources)
    )


def find_upgrades(convergence: Convergence, plan: Plan) -> list[Upgrade]:
    """Stacks where a running container is about to be replaced by one of another image."""
    result = []
    for stack_plan in convergence.stacks:
        stack = plan.stacks.get(stack_plan.name)
        if stack is None:
            continue
        changes = tuple(
            ImageChange(a.service, a.container.image, stack.services[a.service].image)
            for a in stack_plan.actions
            if a.action == "recreate"
            and a.reason != REPAIR
            and a.container is not None
            and (a.cause == "image" or a.container.image != stack.services[a.service].image)
        )
        if changes:
            result.append(Upgrade(stack_plan.name, changes, stack_datasets(plan, stack)))
    return result


def refusals(upgrades: list[Upgrade], zfs: Zfs) -> list[str]:
    """Why some upgrade could not be undone: a dataset not on ZFS, or too little room for the snapshot
    to diverge (less than a tenth of the data it holds, and never under MIN_FREE)."""
    if not upgrades:
        return []
    try:
        known = set(zfs.names())
    except CommandFailed:
        known = set()
    problems = []
    for up in upgrades:
        for name in up.datasets:
            if name not in known:
                problems.append(f"{up.stack}: dataset {name} is not on ZFS, so no snapshot can be taken")
                continue
            free, used = _bytes(zfs.get(name, "available")), _bytes(zfs.get(name, "referenced"))
            need = max(MIN_FREE, (used or 0) // 10)
            if free is not None and free < need:
                problems.append(
                    f"{up.stack}: dataset {name} has {free >> 20} MiB free, an upgrade needs {need >> 20} MiB"
                )
    return problems


def _bytes(value: str) -> int | None:
    return int(value) if value.isdigit() else None


def read_composes(out: Path) -> dict[str, bytes]:
    """stack -> its compose.yaml as on disk now (call before rendering: what a rollback returns to)."""
    return {p.parent.name: p.read_bytes() for p in sorted(out.glob(f"*/{COMPOSE_FILE}"))}


def guard_for(
    convergence: Convergence,
    plan: Plan,
    out: Path,
    docker: Engine,
    previous: dict[str, bytes],
    snapshot: bool,
    timeout: float,
    progress: Callable[[str], None],
    zfs: Zfs | None = None,
) -> Guard:
    """The guard for this `up`; UpgradeRefused, before anything runs, when an upgrade could not be undone."""
    zfs = zfs or ZfsCli()
    upgrades = find_upgrades(convergence, plan)
    problems = refusals(upgrades, zfs) if snapshot else []
    if problems:
        raise UpgradeRefused(
            "refusing to upgrade what could not be rolled back:\n  "
            + "\n  ".join(problems)
            + "\nfree space or move the data onto ZFS, or pass --no-snapshot to upgrade without a way back"
        )
    return Guard(out, docker, zfs, upgrades, previous, snapshot, timeout, progress)


def rollback_compose(previous: bytes, changes: tuple[ImageChange, ...]) -> bytes:
    """The compose.yaml to return to: the one on disk before this render, unless it does not name the
    images that run (an earlier `up` rendered and then stopped, refused or killed): then its services
    get the running images back."""
    data = yaml.safe_load(previous) or {}
    services = data.get("services") or {}
    stale = [c for c in changes if c.service in services and services[c.service].get("image") != c.old]
    if not stale:
        return previous
    for change in stale:
        services[change.service]["image"] = change.old
    return yaml.safe_dump(data, sort_keys=False, width=1 << 16).encode()


# --- the guard around one stack's apply ------------------------------------------------------------


@dataclass
class Guard:
    """Wraps apply's step for each stack (apply.apply(..., guard=...)): snapshot before an upgrade,
    roll back when the health gate fails. `previous` maps a stack to its compose.yaml before this render."""

    out: Path
    docker: Engine
    zfs: Zfs
    upgrades: list[Upgrade]
    previous: dict[str, bytes]
    snapshot: bool = True
    timeout: float = 300
    progress: Callable[[str], None] = lambda _msg: None

    @contextmanager
    def __call__(self, stack: StackPlan) -> Iterator[None]:
        upgrade = next((u for u in self.upgrades if u.stack == stack.name), None)
        if upgrade is None or stack.name not in self.previous:
            yield
            return
        record = self._prepare(upgrade)
        try:
            yield
        except ApplyFailed as failure:
            folder = self._keep_logs(record, stack.project)
            self.progress(f"{stack.name}: upgrade failed, rolling back ({failure})")
            restore(record, self.out, self.docker, self.zfs, self.timeout, self.progress)
            record.state = "rolled-back"
            record.notes.append(str(failure))
            record.save(self.out)
            data = "its data from before the upgrade" if record.snapshot else "the data as the new version left it"
            raise RolledBack(
                f"{stack.name}: the upgrade did not become healthy and was rolled back; the previous "
                f"version runs again on {data}\n{failure}\n"
                f"  the failed version's logs: {folder}"
            ) from None
        record.state = "upgraded"
        record.save(self.out)
        prune(self.out, self.zfs, stack.name, self.progress)

    def _prepare(self, upgrade: Upgrade) -> Record:
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        record = Record(upgrade.stack, stamp, list(upgrade.datasets), list(upgrade.changes))
        if self.snapshot:
            record.snapshot = f"{SNAPSHOT_PREFIX}{upgrade.stack}-{stamp}"
            for name in upgrade.datasets:
                self.zfs.snapshot(name, record.snapshot)
        folder = record.save(self.out)
        (folder / COMPOSE_FILE).write_bytes(rollback_compose(self.previous[upgrade.stack], upgrade.changes))
        moved = ", ".join(f"{c.service} {c.old} -> {c.new}" for c in upgrade.changes)
        where = f"snapshot @{record.snapshot}" if record.snapshot else "no snapshot (--no-snapshot)"
        self.progress(f"{upgrade.stack}: upgrading {moved}; {where}")
        return record

    def _keep_logs(self, record: Record, project: str) -> Path:
        folder = self.out / RECORDS_DIR / record.folder_name
        for c in self.docker.containers([project]):
            (folder / f"{c.service}.log").write_text(self.docker.logs_tail(c.id, LOG_LINES) + "\n", encoding="utf-8")
        return folder


# --- rolling back, listing, retention --------------------------------------------------------------


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


def list_records(out: Path, stack: str | None = None) -> list[Record]:
    """Every upgrade record, oldest first (optionally of one stack)."""
    found = [Record.load(p) for p in sorted((out / RECORDS_DIR).glob("*/record.json"))]
    return sorted((r for r in found if stack is None or r.stack == stack), key=lambda r: r.stamp)


def rollback(
    out: Path, docker: Engine, zfs: Zfs, stack: str, *, timeout: float, progress: Callable[[str], None]
) -> Record:
    """`homelab rollback STACK`: undo the stack's last upgrade while its snapshot exists."""
    done = [r for r in list_records(out, stack) if r.state == "upgraded"]
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
    restore(record, out, docker, zfs, timeout, progress)
    record.state = "rolled-back"
    record.notes.append("rolled back by hand")
    record.save(out)
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
