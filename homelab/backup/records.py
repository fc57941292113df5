"""What backups record, as typed models with a schema version: a run (and each dataset's outcome in it), a
verify, a drill, the marker of a run in progress, and the status built from them.

Written as JSON (homelab.backup.state) and read back through the same models, so a record that does not
parse is an error naming its file, never a silently missing run. `status --json` prints `Status`.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION: Literal[1] = 1
Outcome = Literal["success", "failed"]
RunState = Literal["running", "success", "failed", "interrupted"]


def iso(t: datetime) -> str:
    return t.astimezone(UTC).isoformat(timespec="seconds")


class Part(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Record(Part):
    """A record saved as one JSON file; records written before the version field existed are version 1."""

    schema_version: Literal[1] = SCHEMA_VERSION


class DatasetRun(Part):
    """One dataset to one remote within a run."""

    dataset: str  # the ZFS dataset
    key: str  # <app>/<role>
    remote: str
    result: Outcome = "success"
    error: str | None = None
    transferred_files: int = 0
    transferred_bytes: int = 0
    checked_files: int = 0
    derived_files: int = 0  # objects stored under a derived name (homelab.backup.names)
    files: int = 0
    bytes: int = 0
    manifest: str = ""  # the listing in the state folder, relative to it
    snapshot: str = ""
    tree: str | None = None  # the listing on the remote (meta/...), once uploaded
    partial_files: int | None = None  # a sync that did not finish: the files that reached the remote
    tree_fingerprint: str | None = None

    @property
    def ok(self) -> bool:
        return self.result == "success"


class Run(Record):
    id: str
    start: datetime
    end: datetime | None = None
    duration: float | None = None
    result: RunState = "running"
    snapshot: str
    remotes: list[str]
    datasets: list[DatasetRun] = Field(default_factory=list)
    bytes: int = 0
    files: int = 0
    transferred_bytes: int = 0
    error: str | None = None
    pid: int | None = None  # the process making it, while it runs
    bundle: str | None = None  # the recovery bundle on the remotes (homelab.backup.bundle), once written


class LastGood(Part):
    """The newest successful backup of one dataset to one remote: what verify, drill and prune rely on."""

    run: str
    start: datetime
    end: datetime | None
    entry: DatasetRun


class Damage(Part):
    """Objects a verify found damaged or missing on one remote: the next run uploads them again."""

    key: str
    remote: str
    paths: list[str]


class Verify(Record):
    id: str
    time: datetime
    checked: int
    result: Outcome
    problems: list[str] = Field(default_factory=list)
    damaged: list[Damage] = Field(default_factory=list)


class Drill(Record):
    id: str
    time: datetime
    full: bool
    files: int
    result: Outcome
    problems: list[str] = Field(default_factory=list)


class RecoveryDrill(Record):
    """`backup drill --recover`: the whole recovery into scratch, compared with the snapshot it came from."""

    id: str
    time: datetime
    bundle: str | None
    result: Outcome
    rto_seconds: float | None = None
    rpo_seconds: float | None = None
    datasets: int = 0
    sentinels: int = 0
    problems: list[str] = Field(default_factory=list)


class Running(Record):
    """running.json: the run in progress and the snapshots it reads (pruning never touches them)."""

    pid: int
    run: str
    snapshots: dict[str, str] = Field(default_factory=dict)


class Status(Record):
    """`backup status --json`. `healthy` is false (exit 1) when the last run did not succeed, or the last
    verify or drill failed."""

    last_run: Run | None
    last_run_state: RunState | None  # "interrupted": recorded as running, but no process is making it
    last_success: str | None
    last_success_age_hours: float | None
    running: Running | None
    last_verify: Verify | None
    last_drill: Drill | None  # the last attempt, failed or not
    last_good_drill: Drill | None
    last_good_drill_age_days: float | None
    last_recovery_drill: RecoveryDrill | None = None  # the last attempt, failed or not
    last_good_recovery_drill_age_days: float | None = None
    problems: list[str]

    @property
    def healthy(self) -> bool:
        return not self.problems
