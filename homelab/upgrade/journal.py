"""The upgrade journal: one record per upgrade, in `<stacks>/.homelab-upgrades/<stack>-<stamp>/record.json`.

A record says what changed, which snapshot undoes it, and which step the upgrade is in; it is saved
(atomically, 0600, synced) before each step, so a `homelab` killed at any moment leaves the step it was
in for the next `up` to finish or undo (homelab.upgrade.undo.recover).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

from homelab.errors import ExitCode, HomelabError
from homelab.plan_model import Stack

RECORDS_DIR = ".homelab-upgrades"
DUMP_FILE = "homelab-upgrade-dump.sql"  # in the Postgres dataset, next to the pages it describes
# The steps: "snapshotting" (dump + snapshots being taken: the stack not touched yet), "applying"
# (snapshots complete: compose up + health gate), "rolling-back"; then how it ended.
State = Literal["snapshotting", "applying", "rolling-back", "upgraded", "rolled-back", "abandoned"]
INTERRUPTED: tuple[State, ...] = ("snapshotting", "applying", "rolling-back")
# "<point>:<file>": on reaching that point (a state, or "rollback-composed": the rollback's compose up
# returned), write our pid to <file> and wait to be killed (tests/docker/test_upgrade_kill.py kills
# homelab -9 at a known step this way)
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


@dataclass
class Record:
    """One upgrade as kept on disk: what changed, which snapshot undoes it, how it ended."""

    stack: str
    stamp: str
    datasets: list[str]
    changes: list[ImageChange]
    state: State = "snapshotting"
    snapshot: str | None = None  # the part after @; None: taken with --no-snapshot
    notes: list[str] = field(default_factory=list)
    dumps: list[str] = field(default_factory=list)  # files pg_dump wrote before the snapshot
    pid: int = 0  # of the homelab running it: a live one is not recovered under its feet
    started: str = ""  # that process's start time (/proc), so a reused pid is not taken for it
    databases: list[Dump] = field(default_factory=list)  # the servers dumped: a rollback asks them what changed
    healthy_at: str = ""  # UTC, when the new version first passed the health gate: from then on it served
    data_restored: bool = False  # the rollback put the datasets back: finishing it never does that again
    safety: str | None = None  # the snapshot of the state a rollback discarded (kept, never destroyed)

    @property
    def served(self) -> bool:
        """The new version passed the gate: undoing it may discard what was written through it."""
        return bool(self.healthy_at)

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
        checkpoint(state)

    @classmethod
    def load(cls, path: Path) -> Record:
        data = json.loads(path.read_text(encoding="utf-8"))
        data["changes"] = [ImageChange(**c) for c in data["changes"]]
        data["databases"] = [Dump(**d) for d in data.get("databases", [])]
        return cls(**data)


def checkpoint(point: str) -> None:
    """Where a test's HOLD_ENV may stop this process to kill it."""
    hold, _, marker = os.environ.get(HOLD_ENV, "").partition(":")
    if hold == point and marker:
        Path(marker).write_text(f"{os.getpid()}\n", encoding="utf-8")
        while True:
            time.sleep(60)


def process_started(pid: int) -> str:
    """When a process started (clock ticks since boot, /proc/PID/stat field 22); "" when it is gone or
    a zombie. With the pid it tells a live homelab from a later process that got the same pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    except OSError:
        return ""
    fields = stat.rpartition(")")[2].split()  # the command name in (...) may hold spaces
    return "" if fields[0] == "Z" else fields[19]


def list_records(out: Path, stack: str | None = None) -> list[Record]:
    """Every upgrade record, oldest first (optionally of one stack)."""
    found = [Record.load(p) for p in sorted((out / RECORDS_DIR).glob("*/record.json"))]
    return sorted((r for r in found if stack is None or r.stack == stack), key=lambda r: r.stamp)


def unsettled(out: Path, stacks: list[str] | None = None) -> list[str]:
    """One line per upgrade or rollback the journal holds unfinished (of the named stacks, else all):
    `status` and `up` exit non-zero while there is one, whatever the containers do."""
    lines = []
    for record in list_records(out):
        if record.state in INTERRUPTED and (not stacks or record.stack in stacks):
            up, back = f"`homelab up {record.stack}`", f"`homelab rollback {record.stack}`"
            what, how = "rollback", f"{up} or {back}"
            if record.state != "rolling-back":  # `rollback` leaves an unfinished upgrade to `up`
                what, how = "upgrade", up
            elif record.served and not record.data_restored:  # `up` never discards what was served
                how = f"{back} (it asks first)"
            lines.append(
                f"{what} of {record.stack} unfinished (journal {record.folder_name}: {record.state}); {how} finishes it"
            )
    return lines


PGDATA = "/var/lib/postgresql/data"  # the postgres image's data folder (homelab/images/facts/postgres.yaml)


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
