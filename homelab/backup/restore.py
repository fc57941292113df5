"""`backup restore`: one dataset (or a path in it) into an empty folder, as of the latest run or a date.

Always driven by a listing: the latest is the listing of the last complete run (a run that died midway
leaves `current/` half new, half old: what it replaced sits in its archive, so the last complete run comes
back exactly); `--at` takes the newest listing at or before the date, a partial one included (it says so).
Everything `--at` needs is read from the remote, so a new machine with no state folder (the pool that held
it lost) restores any date as well as the machine that made the backups. Each file is taken from the first
later run's archive that holds it, else from `current/`. The restored files are then compared with the
listing: one that did not come back fails the restore.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from homelab.backup import listing, tree
from homelab.backup.context import BackupError, Context
from homelab.backup.records import iso
from homelab.backup.retention import STAMP
from homelab.plan_model import Dataset


@dataclass
class Restored:
    dataset: str
    remote: str
    files: int
    as_of: str  # the run whose listing was restored
    metadata: int  # entries whose owner/mode/mtime were applied
    owners_restored: bool
    missing: list[str] = field(default_factory=list)  # a partial run's paths that never reached the remote


def restore(
    ctx: Context,
    key: str,
    to: Path,
    *,
    at: datetime | None = None,
    subpath: str | None = None,
    remote: str | None = None,
    chosen: listing.Listing | None = None,
    found: dict[str, list[str]] | None = None,
) -> Restored:
    """`chosen`, `found`: the listing and where its objects are (listing.sources), when the caller has
    them already (a recovery found them while checking the remote); else read from the remote here."""
    (d,) = ctx.select([key])
    remote = remote or ctx.remotes[0]
    if to.exists() and any(to.iterdir()):
        raise BackupError(f"{to} is not empty: restore only into a new or empty folder")
    to.mkdir(parents=True, exist_ok=True)
    sub = (subpath or "").strip("/")
    chosen = chosen or chosen_listing(ctx, d, remote, at)
    wanted = tree.under(chosen.entries, sub)
    label = f"restore-{remote}-{d.key.replace('/', '_')}"
    files = listing.download(ctx, d, remote, chosen.run, wanted, to, label, None if sub else found)
    applied = tree.apply(to, wanted)
    lost = [p for p in tree.differences(wanted, to) if p.endswith(": not restored")]
    if lost:
        more = f" (and {len(lost) - 10} more)" if len(lost) > 10 else ""
        raise BackupError(f"restore of {d.key} is incomplete: " + "; ".join(lost[:10]) + more)
    missing = [p for p in chosen.missing if not sub or p == sub or p.startswith(sub + "/")]
    return Restored(d.key, remote, files, chosen.run, applied.entries, not applied.owners_skipped, missing)


def chosen_listing(
    ctx: Context, d: Dataset, remote: str, at: datetime | None, listed: list[listing.Listed] | None = None
) -> listing.Listing:
    """The listing a restore as of `at` (None: the latest complete run) follows. `listed`: the dataset's
    listings on the remote (listing.runs_with_listing), when the caller listed them already."""
    if at is None:
        return listing.latest(ctx, d, remote, ctx.last_success(d.key, remote))
    limit = at.astimezone(UTC).strftime(STAMP)
    runs = listed if listed is not None else listing.runs_with_listing(ctx, d, remote)
    older = [n for n in runs if n.run.split("-")[0] <= limit]
    if not older:
        raise BackupError(f"no backup of {d.key} on {remote} at or before {iso(at)} (no listing in meta/{d.key}/)")
    return listing.fetch(ctx, d, remote, older[-1])
