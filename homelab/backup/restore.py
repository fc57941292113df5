"""`backup restore`: one dataset (or a path in it) into an empty folder, as of the latest run or a date.

Everything `--at` needs is read from the remote, so a new machine with no state folder (the pool that held
it lost) restores any date as well as the machine that made the backups: the newest listing at or before
the date says which files existed then and their metadata; a file a later run replaced or deleted sits in
that run's archive (the first later archive holding it has the version of the date), else in `current/`.
The restored files are then compared with the listing: one that did not come back fails the restore.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from homelab.backup import listing, tree
from homelab.backup.context import BackupError, Context
from homelab.backup.records import iso
from homelab.backup.retention import STAMP
from homelab.plan import Dataset


@dataclass
class Restored:
    dataset: str
    remote: str
    files: int
    as_of: str  # "latest" or the run whose listing was restored
    metadata: int  # entries whose owner/mode/mtime were applied
    owners_restored: bool


def restore(
    ctx: Context,
    key: str,
    to: Path,
    *,
    at: datetime | None = None,
    subpath: str | None = None,
    remote: str | None = None,
) -> Restored:
    (d,) = ctx.select([key])
    remote = remote or ctx.remotes[0]
    if to.exists() and any(to.iterdir()):
        raise BackupError(f"{to} is not empty: restore only into a new or empty folder")
    to.mkdir(parents=True, exist_ok=True)
    sub = (subpath or "").strip("/")
    if at is None:
        files, as_of, entries = _restore_latest(ctx, d, remote, to, sub)
    else:
        files, as_of, entries = _restore_at(ctx, d, remote, to, at, sub)
    wanted = tree.under(entries, sub)
    applied = tree.apply(to, wanted)
    lost = [p for p in tree.differences(wanted, to) if p.endswith(": not restored")]
    if lost:
        more = f" (and {len(lost) - 10} more)" if len(lost) > 10 else ""
        raise BackupError(f"restore of {d.key} is incomplete: " + "; ".join(lost[:10]) + more)
    return Restored(d.key, remote, files, as_of, applied.entries, not applied.owners_skipped)


def _restore_latest(ctx: Context, d: Dataset, remote: str, to: Path, sub: str) -> tuple[int, str, list[tree.Entry]]:
    label = f"restore-{remote}-{d.key.replace('/', '_')}"
    result = ctx.rclone.copy(ctx.remote_path(remote, "current", d.key), to, label=label, subpath=sub)
    if not result.ok:
        raise BackupError(f"restore of {d.key} failed: {result.why('copy')}")
    return result.stats.transfers, "latest", listing.latest(ctx, d, remote, ctx.last_success(d.key, remote))


def _restore_at(
    ctx: Context, d: Dataset, remote: str, to: Path, at: datetime, sub: str
) -> tuple[int, str, list[tree.Entry]]:
    limit = at.astimezone(UTC).strftime(STAMP)
    older = [run_id for run_id in listing.runs_with_listing(ctx, d, remote) if run_id.split("-")[0] <= limit]
    if not older:
        raise BackupError(f"no backup of {d.key} on {remote} at or before {iso(at)} (no listing in meta/{d.key}/)")
    chosen = older[-1]
    entries = listing.fetch(ctx, d, remote, chosen)
    total = 0
    for root, files in _sources(ctx, d, remote, chosen, tree.rclone_names(tree.under(entries, sub))).items():
        result = ctx.rclone.copy(root, to, label=f"restore-at-{remote}-{d.key.replace('/', '_')}", files=files)
        if not result.ok:
            raise BackupError(f"restore of {d.key} as of {chosen} failed: {result.why('copy')}")
        total += result.stats.transfers
    return total, chosen, entries


def _sources(ctx: Context, d: Dataset, remote: str, chosen: str, wanted: list[str]) -> dict[str, list[str]]:
    """Where each wanted object of run `chosen` is now: the first later run's archive holding it, else current."""
    sources: dict[str, list[str]] = {}
    remaining = set(wanted)
    later_runs = sorted(n.rstrip("/") for n in ctx.rclone.list_dirs(ctx.remote_path(remote, "archive")))
    for later in (n for n in later_runs if n > chosen):
        if not remaining:
            break
        root = ctx.remote_path(remote, "archive", later, d.key)
        hits = sorted(remaining & set(ctx.rclone.list_files(root, recursive=True)))
        if hits:
            sources[root] = hits
            remaining -= set(hits)
    if remaining:
        sources[ctx.remote_path(remote, "current", d.key)] = sorted(remaining)
    return sources
