"""The next `up` settles the upgrade journal first: each upgrade or rollback a killed `homelab` left half
done (homelab.upgrade.journal's states) is finished or undone, stack by stack, before anything is rendered.

A stack it rolls back now, or whose rollback it cannot finish (the version served and something would be
discarded, a snapshot is gone, the previous version is not healthy in time, a backup reads its data...), is
left as it is by this `up` (`Recovery.held`): `up` still brings up the others and then fails with
`Recovery.error()`, which says which journal is unsettled, why, and what finishes it. One stack's journal
never blocks `up` of the others.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from homelab.engine.compose import up_healthy
from homelab.engine.model import StackPlan
from homelab.errors import ExitCode, HomelabError
from homelab.runtime.docker import Engine
from homelab.runtime.zfs import Zfs
from homelab.upgrade.journal import INTERRUPTED, Record, RolledBack, UpgradeRefused, list_records, unsettled
from homelab.upgrade.undo import abandon, gated, marked, refuse, refuse_if_alive, restore


class Held(HomelabError):
    """`up` left stacks as they are (their journal rolled back now, or not settled); the others came up.
    Exit 5 when each was a refusal (nothing done to it), else 1."""


@dataclass
class Recovery:
    """What settling the journal did: the records it settled, and the stacks this `up` leaves as they are."""

    out: Path
    settled: list[Record] = field(default_factory=list)
    held: dict[str, HomelabError] = field(default_factory=dict)  # stack -> why

    def error(self) -> Held | None:
        """The error `up` ends with once the other stacks are up: per held stack, the journal line `status`
        prints while it is unsettled (what finishes it), then why."""
        if not self.held:
            return None
        lines = []
        for stack, why in self.held.items():
            lines += unsettled(self.out, [stack])
            lines.append(str(why))
        error = Held("\n".join(lines))
        refused = all(isinstance(why, UpgradeRefused) for why in self.held.values())
        error.exit_code = ExitCode.REFUSED if refused else ExitCode.FAILED
        return error


def recover(
    out: Path,
    docker: Engine,
    zfs: Zfs,
    *,
    timeout: float,
    progress: Callable[[str], None],
    stacks: list[str] | None = None,
    marks: Path | None = None,
) -> Recovery:
    """Finish or undo every upgrade a killed `homelab` left in the journal (of `stacks`, else all), before
    `up` does anything else; while it does, the stack's datasets are marked for backups as in an upgrade
    (`marks`: the backup state folder, homelab.backup.lock):
    - "snapshotting": the stack was not touched: its snapshots are destroyed ("abandoned"); `up` then
      upgrades afresh;
    - "applying": compose up of the stack as rendered and the health gate, as the killed run would
      have: healthy is "upgraded", else rolled back (held: the killed `up` would have stopped there);
    - "rolling-back": the rollback is finished (held, as the killed run would have failed): if its data
      step was done, only the previous version's compose up and gate; else the data step too, unless the
      version served and something would be discarded: then it is held unsettled and `homelab rollback`
      decides.
    A homelab still running the upgrade (UpgradeRefused), or any step failing, holds that stack only."""
    found = Recovery(out)
    for record in list_records(out):
        if record.state not in INTERRUPTED or (stacks and record.stack not in stacks) or record.stack in found.held:
            continue
        try:
            refuse_if_alive(record)
            progress(f"{record.stack}: the upgrade of {record.stamp} was interrupted while {record.state}")
            _settle(record, out, docker, zfs, timeout, progress, marks)
        except HomelabError as why:
            found.held[record.stack] = why
            progress(f"{record.stack}: left as it is by this up ({str(why).splitlines()[0].rstrip(':')})")
        if record.state not in INTERRUPTED:
            found.settled.append(record)
    return found


def _settle(
    record: Record,
    out: Path,
    docker: Engine,
    zfs: Zfs,
    timeout: float,
    progress: Callable[[str], None],
    marks: Path | None,
) -> None:
    if record.state == "snapshotting":
        abandon(record, out, zfs, "interrupted before the stack was touched; its snapshots were removed")
        progress(f"{record.stack}: nothing was changed yet; the upgrade starts over")
    elif record.state == "applying":
        record.notes.append("compose up and gate finished by the next up after an interrupted one")
        with (
            marked(marks, record.datasets, f"upgrade of {record.stack}"),
            gated(record, out, docker, zfs, timeout, progress),
        ):
            up_healthy(docker, StackPlan(record.stack, out / record.stack), timeout, [], progress)
        progress(f"{record.stack}: the interrupted upgrade is finished and healthy")
    else:
        record.notes.append("rollback finished by the next up after an interrupted one")
        with marked(marks, record.datasets, f"rollback of {record.stack}"):
            restore(record, out, docker, zfs, timeout, progress, decide=refuse if record.served else None)
        record.step(out, "rolled-back")
        raise RolledBack(f"{record.stack}: the interrupted rollback of {record.stamp} is finished")
