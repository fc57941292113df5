"""Upgrades you can undo: a snapshot before an app's image changes, a rollback when it does not come up.

When `up` would give a stack's service another image (a new catalog pin, an `images:` override, or the
same tag now naming another image), the stack's datasets are snapshotted (`@homelab-upgrade-<stack>-<stamp>`)
and its previous compose.yaml is kept, before the stack is touched. If the health gate then fails, the
stack is taken down, its datasets are rolled back to that snapshot, the previous compose.yaml is put back
and brought up, and the gate runs again; the failed version's logs are kept next to the record.
`homelab rollback STACK` does the same by hand (homelab.upgrade.undo). Records live in
`<stacks>/.homelab-upgrades/<stack>-<stamp>/` and are the upgrade's journal (homelab.upgrade.journal):
the next `up` reads it first and finishes or undoes what a killed `homelab` left half done. A Postgres
server of the stack is dumped (`pg_dump` into its own dataset) before the snapshot, so the snapshot
holds a dump as well as the crash-consistent pages.

The unit is the stack (one compose project): its images move together and its containers are what
holds its datasets open.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import yaml

from homelab.engine.drift import REPAIR
from homelab.engine.model import Convergence, StackPlan
from homelab.errors import CommandFailed, HomelabError
from homelab.layout import COMPOSE_FILE
from homelab.plan_model import Plan, Stack
from homelab.runtime.docker import Engine
from homelab.runtime.zfs import Zfs, ZfsCli
from homelab.upgrade.journal import (
    DUMP_FILE,
    RECORDS_DIR,
    Dump,
    ImageChange,
    Record,
    UpgradeRefused,
    process_started,
    stack_dumps,
)
from homelab.upgrade.settle import Recovery, recover
from homelab.upgrade.undo import abandon, gated, marked

SNAPSHOT_PREFIX = "homelab-upgrade-"
MIN_FREE = 64 << 20  # bytes free a dataset needs at least for the upgrade to write beside its snapshot
DUMP_TIMEOUT = 3600


@dataclass(frozen=True)
class Upgrade:
    stack: str
    changes: tuple[ImageChange, ...]
    datasets: tuple[str, ...]  # ZFS names of the datasets the stack's services mount
    dumps: tuple[Dump, ...] = ()


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
            result.append(Upgrade(stack_plan.name, changes, stack_datasets(plan, stack), stack_dumps(stack)))
    return result


def backup_state(plan: Plan) -> Path:
    """The state folder `backup` uses: $HOMELAB_BACKUP_STATE, else backup.state_dir
    (homelab.backup.context.default_state_dir). Backups and upgrades mark there the datasets they hold."""
    from homelab.backup.context import STATE_ENV  # the backup package: only when an upgrade is about to run

    return Path(os.environ.get(STATE_ENV) or plan.config.backup_state_dir)


def held_by_backup(state: Path) -> set[str]:
    """The datasets a live backup run is reading (homelab.backup.lock: markers the run holds flock'ed, so
    one a killed run left never counts)."""
    from homelab.backup.lock import running_datasets

    return running_datasets(state)


def refusals(upgrades: list[Upgrade], zfs: Zfs, held: set[str] | None = None) -> list[str]:
    """Why some upgrade could not be undone: a dataset not on ZFS, too little room for the snapshot
    to diverge (less than a tenth of the data it holds, and never under MIN_FREE), or a running backup
    reading it (it would copy data a rollback is half way through putting back)."""
    if not upgrades:
        return []
    held = held or set()
    try:
        known = set(zfs.names())
    except CommandFailed:
        known = set()
    problems = []
    for up in upgrades:
        for name in up.datasets:
            if name in held:
                problems.append(f"{up.stack}: dataset {name} is being read by a running backup; wait for it to end")
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


def journal_first(
    out: Path,
    docker: Engine,
    *,
    timeout: float,
    progress: Callable[[str], None],
    dry_run: bool,
    only: list[str] | None = None,
    marks: Path | None = None,
) -> tuple[Recovery, dict[str, bytes]]:
    """What `up` does before rendering: finish or undo the upgrades and rollbacks a killed `homelab` left in
    the journal of the stacks it brings up (all when none are named; not on a dry run; the datasets marked
    in the backup state folder `marks` meanwhile), then read the compose files a rollback would return to.
    The stacks the Recovery holds are left as they are by this `up`."""
    if dry_run:
        return Recovery(out), read_composes(out)
    recovery = recover(out, docker, ZfsCli(), timeout=timeout, progress=progress, stacks=only, marks=marks)
    return recovery, read_composes(out)


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
    state = backup_state(plan)
    problems = refusals(upgrades, zfs, held_by_backup(state)) if upgrades and snapshot else []
    if problems:
        raise UpgradeRefused(
            "refusing to upgrade what could not be rolled back:\n  "
            + "\n  ".join(problems)
            + "\nwait for the backup, free space or move the data onto ZFS, or pass --no-snapshot to upgrade"
            " without a way back"
        )
    return Guard(out, docker, zfs, upgrades, previous, state, snapshot, timeout, progress)


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
    """Wraps apply's step for each stack (apply.apply(..., guard=...)): journal, dump and snapshot before
    an upgrade, roll back when the health gate fails. `previous` maps a stack to its compose.yaml before
    this render."""

    out: Path
    docker: Engine
    zfs: Zfs
    upgrades: list[Upgrade]
    previous: dict[str, bytes]
    marks: Path  # the backup state folder: the upgrade marks its datasets there (homelab.backup.lock)
    snapshot: bool = True
    timeout: float = 300
    progress: Callable[[str], None] = lambda _msg: None

    @contextmanager
    def __call__(self, stack: StackPlan) -> Iterator[None]:
        upgrade = next((u for u in self.upgrades if u.stack == stack.name), None)
        if upgrade is None or stack.name not in self.previous:
            yield
            return
        with marked(self.marks if self.snapshot else None, upgrade.datasets, f"upgrade of {stack.name}"):
            record = self._prepare(upgrade)
            with gated(record, self.out, self.docker, self.zfs, self.timeout, self.progress):
                yield

    def _prepare(self, upgrade: Upgrade) -> Record:
        """Journal, dump, snapshot: the stack itself is not touched until the journal says "applying"."""
        base = stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        n = 0
        while (self.out / RECORDS_DIR / f"{upgrade.stack}-{stamp}").exists():  # a retry within the second
            n += 1
            stamp = f"{base}-{n}"
        pid = os.getpid()
        record = Record(upgrade.stack, stamp, list(upgrade.datasets), list(upgrade.changes), pid=pid)
        record.databases = list(upgrade.dumps)
        record.started = process_started(pid)
        snapshot = f"{SNAPSHOT_PREFIX}{upgrade.stack}-{stamp}"
        if self.snapshot:
            record.snapshot = snapshot
        folder = self.out / RECORDS_DIR / record.folder_name
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        # the compose.yaml to return to is in place before the journal names the upgrade
        (folder / COMPOSE_FILE).write_bytes(rollback_compose(self.previous[upgrade.stack], upgrade.changes))
        record.step(self.out, "snapshotting")
        try:
            record.dumps = self._dump(upgrade)
            for name in upgrade.datasets if record.snapshot else ():
                self.zfs.snapshot(name, snapshot)
        except (CommandFailed, OSError) as exc:
            abandon(record, self.out, self.zfs, f"could not be prepared: {exc}")
            raise HomelabError(
                f"{upgrade.stack}: the upgrade could not be prepared, nothing of the stack was changed: {exc}"
            ) from None
        moved = ", ".join(f"{c.service} {c.old} -> {c.new}" for c in upgrade.changes)
        where = f"snapshot @{record.snapshot}" if record.snapshot else "no snapshot (--no-snapshot)"
        self.progress(f"{upgrade.stack}: upgrading {moved}; {where}")
        record.step(self.out, "applying")
        return record

    def _dump(self, upgrade: Upgrade) -> list[str]:
        """pg_dump of each running Postgres server of the stack into its own dataset, before the snapshot:
        the snapshot then holds a dump as well as the pages (a server stopped needs none)."""
        if not upgrade.dumps:
            return []
        stack = StackPlan(upgrade.stack, self.out / upgrade.stack)
        running = {c.service for c in self.docker.containers([stack.project]) if c.running}
        written = []
        for dump in upgrade.dumps:
            if dump.service not in running:
                self.progress(f"{upgrade.stack}: {dump.service} is not running, its files are consistent: no dump")
                continue
            dest = Path(dump.folder) / DUMP_FILE
            argv = ["pg_dump", "--username", dump.user, "--dbname", dump.database, "--no-password"]
            began = time.monotonic()
            self.docker.exec_to_file(stack.project, stack.directory, dump.service, argv, dest, timeout=DUMP_TIMEOUT)
            written.append(str(dest))
            self.progress(
                f"{upgrade.stack}: dumped {dump.service}'s database {dump.database} to {dest} "
                f"({dest.stat().st_size >> 10} KiB, {time.monotonic() - began:.1f}s)"
            )
        return written
