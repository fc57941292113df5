"""Putting the remote right: objects the last verify found damaged or missing are deleted before the next
run's sync, which uploads them again; a `--deep` run cryptchecks every object (not only those it wrote)
and uploads again what differs from the snapshot - a source file rewritten with the same size and mtime,
which a sync cannot see (crypt keeps no hashes to compare), or damage no verify has seen yet."""

from __future__ import annotations

from homelab.backup.check import Part
from homelab.backup.context import Context
from homelab.runtime.rclone import CheckResult


def damaged(ctx: Context, key: str, remote: str) -> list[str]:
    """What the newest verify found damaged or missing, unless a successful run came after it."""
    verifies = ctx.state.verifies()
    if not verifies:
        return []
    newest = verifies[-1]
    last = ctx.last_success(key, remote)
    if last is not None and last.end is not None and last.end > newest.time:
        return []
    return [p for found in newest.damaged if found.key == key and found.remote == remote for p in found.paths]


def deep_check(ctx: Context, part: Part, label: str) -> tuple[CheckResult, int]:
    """cryptcheck everything; what differs moves to this run's archive and is uploaded again, then checked.
    The final check, and how many objects were uploaded again."""
    found = part.check(ctx.rclone, f"{label}-deep")
    stale = found.differ + found.missing
    if not stale or found.errors or found.extra:
        return found, 0
    ctx.rclone.move_files(part.dst, part.archive, stale, label=f"{label}-deep-move")
    again = part.sync(ctx.rclone, f"{label}-deep-sync")
    if not again.ok:
        found.errors.append(again.why("sync"))
        return found, 0
    checked = part.check(ctx.rclone, f"{label}-deep-again", stale)
    checked.matched += found.matched
    return checked, len(again.copied)
