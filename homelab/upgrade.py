"""Upgrades you can undo: a snapshot before an app's image changes, a rollback when it does not come up.

When `up` would give a stack's service another image (a new catalog pin, an `images:` override, or the
same tag now naming another image), the stack's datasets are snapshotted (`@homelab-upgrade-<stack>-<stamp>`)
and its previous compose.yaml is kept, before the stack is touched. If the health gate then fails, the
stack is taken down, its datasets are rolled back to that snapshot, the previous compose.yaml is put back
and brought up, and the gate runs again; the failed version's logs are kept next to the record.
`homelab rollback STACK` does the same by hand. Records live in `<stacks>/.homelab-upgrades/<stack>-<stamp>/`.

Each record is also the upgrade's journal: saved (atomically, 0600) before every step, so a `homelab`
killed mid-upgrade leaves the step it was in, and the next `up` reads the journal first and finishes
the upgrade or rolls it back (recover()). A Postgres server of the stack is dumped (`pg_dump` into its
own dataset) before the snapshot, so the snapshot holds a dump as well as the crash-consistent pages.

The unit is the stack (one compose project): its images move together and its containers are what
holds its datasets open.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

import yaml

from homelab.apply import Convergence, StackPlan, up_healthy
from homelab.drift import REPAIR
from homelab.errors import CommandFailed, ExitCode, HomelabError
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

# The journal's steps: "snapshotting" (dump + snapshots being taken: the stack not touched yet),
# "applying" (snapshots complete: compose up + health gate), "rolling-back"; then how it ended.
State = Literal["snapshotting", "applying", "rolling-back", "upgraded", "rolled-back", "abandoned"]
INTERRUPTED: tuple[State, ...] = ("snapshotting", "applying", "rolling-back")
PGDATA = "/var/lib/postgresql/data"  # the postgres image's data folder (homelab/images/facts/postgres.yaml)
DUMP_FILE = "homelab-upgrade-dump.sql"  # in the Postgres dataset, next to the pages it describes
DUMP_TIMEOUT = 3600
# "<state>:<file>": on entering that journal state, write our pid to <file> and wait to be killed
# (tests/docker/test_upgrade_kill.py kills homelab -9 at a known step this way)
HOLD_ENV = "HOMELAB_TEST_UPGRADE_HOLD"


class UpgradeRefused(HomelabError):
    """An upgrade could not be undone (no snapshot possible, a backup holds the data, another upgrade
    runs), so it was not started; or there is nothing to roll back."""

    exit_code = ExitCode.REFUSED


class RolledBack(HomelabError):
    """The new version did not become healthy; the previous one runs again on its previous data."""

    exit_code = 1


@dataclass(frozen=True)
class ImageChange:
    service: str
    old: str
    new: str


@dataclass(frozen=True)
class Dump:
    """A Postgres server of the stack: what `pg_dump` connects as, and the folder the dump goes to."""

    service: str
    user: str
    database: str
    folder: str  # host path of the dataset mounted as PGDATA


@dataclass(frozen=True)
class Upgrade:
    stack: str
    changes: tuple[ImageChange, ...]
    datasets: tuple[str, ...]  # ZFS names of the datasets the stack's services mount
    dumps: tuple[Dump, ...] = ()


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
    dumps: list[str] = field(default_factory=list)  # files pg_dump wrote before the snapshot
    pid: int = 0  # of the homelab running it: a live one is not recovered under its feet
    started: str = ""  # that process's start time (/proc), so a reused pid is not taken for it

    @property
    def folder_name(self) -> str:
        return f"{self.stack}-{self.stamp}"

    def save(self, out: Path) -> Path:
        """Write the journal: a synced 0600 temporary file renamed over record.json, so a kill at any
        moment leaves either the previous step or this one, never half a file."""
        folder = out / RECORDS_DIR / self.folder_name
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = folder / ".record.json.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(json.dumps(asdict(self), indent=1, sort_keys=True) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        tmp.replace(folder / "record.json")
        return folder

    def step(self, out: Path, state: State) -> None:
        """Enter a journal state (saved before the step it names runs)."""
        self.state = state
        self.save(out)
        hold, _, marker = os.environ.get(HOLD_ENV, "").partition(":")
        if hold == state and marker:
            Path(marker).write_text(f"{os.getpid()}\n", encoding="utf-8")
            while True:
                time.sleep(60)

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


def stack_dumps(stack: Stack) -> tuple[Dump, ...]:
    """The stack's Postgres servers: services that mount a dataset as PGDATA. User and database as the
    image's entrypoint defaults them (docker-library/postgres docker-entrypoint.sh: POSTGRES_USER
    defaults to postgres, POSTGRES_DB to the user)."""
    dumps = []
    for service in stack.services.values():
        for mount in service.mounts:
            if mount.target.rstrip("/") == PGDATA and not mount.source.startswith("./"):
                user = service.environment.get("POSTGRES_USER", "postgres")
                dumps.append(Dump(service.name, user, service.environment.get("POSTGRES_DB", user), mount.source))
    return tuple(dumps)


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


def held_by_backup(plan: Plan) -> dict[str, str]:
    """dataset -> the backup run holding it: the running.json marker `backup run` keeps while it reads
    its snapshots (homelab/backup/state.py), while that run's process lives. The state folder is the
    one `backup` uses: $HOMELAB_BACKUP_STATE, else backup.state_dir (homelab.backup.context)."""
    from homelab.backup.context import STATE_ENV  # the backup package: only when an upgrade is about to run
    from homelab.backup.state import State

    marker = State(Path(os.environ.get(STATE_ENV) or plan.config.backup_state_dir)).running()
    if marker is None:
        return {}
    return {name: f"backup run {marker.run} (pid {marker.pid})" for name in marker.snapshots}


def refusals(upgrades: list[Upgrade], zfs: Zfs, held: dict[str, str] | None = None) -> list[str]:
    """Why some upgrade could not be undone: a dataset not on ZFS, too little room for the snapshot
    to diverge (less than a tenth of the data it holds, and never under MIN_FREE), or a running backup
    reading it (its snapshot and clone would stand in the way of `zfs rollback`)."""
    if not upgrades:
        return []
    held = held or {}
    try:
        known = set(zfs.names())
    except CommandFailed:
        known = set()
    problems = []
    for up in upgrades:
        for name in up.datasets:
            if name in held:
                problems.append(f"{up.stack}: dataset {name} is being read by {held[name]}; wait for it to end")
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
    problems = refusals(upgrades, zfs, held_by_backup(plan)) if upgrades and snapshot else []
    if problems:
        raise UpgradeRefused(
            "refusing to upgrade what could not be rolled back:\n  "
            + "\n  ".join(problems)
            + "\nwait for the backup, free space or move the data onto ZFS, or pass --no-snapshot to upgrade"
            " without a way back"
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
            raise roll_back(record, self.out, self.docker, self.zfs, self.timeout, self.progress, failure) from None
        record.step(self.out, "upgraded")
        prune(self.out, self.zfs, stack.name, self.progress)

    def _prepare(self, upgrade: Upgrade) -> Record:
        """Journal, dump, snapshot: the stack itself is not touched until the journal says "applying"."""
        base = stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        n = 0
        while (self.out / RECORDS_DIR / f"{upgrade.stack}-{stamp}").exists():  # a retry within the second
            n += 1
            stamp = f"{base}-{n}"
        pid = os.getpid()
        record = Record(upgrade.stack, stamp, list(upgrade.datasets), list(upgrade.changes), pid=pid)
        record.started = process_started(pid)
        if self.snapshot:
            record.snapshot = f"{SNAPSHOT_PREFIX}{upgrade.stack}-{stamp}"
        folder = self.out / RECORDS_DIR / record.folder_name
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        # the compose.yaml to return to is in place before the journal names the upgrade
        (folder / COMPOSE_FILE).write_bytes(rollback_compose(self.previous[upgrade.stack], upgrade.changes))
        record.step(self.out, "snapshotting")
        try:
            record.dumps = self._dump(upgrade)
            for name in upgrade.datasets if record.snapshot else ():
                self.zfs.snapshot(name, record.snapshot)
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


# --- the journal read first: what a killed `up` left half done -----------------------------------


def process_started(pid: int) -> str:
    """When a process started (clock ticks since boot, /proc/PID/stat field 22); "" when it is gone or
    a zombie. With the pid it tells a live homelab from a later process that got the same pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    except OSError:
        return ""
    fields = stat.rpartition(")")[2].split()  # the command name in (...) may hold spaces
    return "" if fields[0] == "Z" else fields[19]


def recover(
    out: Path, docker: Engine, zfs: Zfs, *, timeout: float, progress: Callable[[str], None]
) -> list[Record]:
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
