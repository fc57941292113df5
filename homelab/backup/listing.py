"""The snapshot's listing on the remote: `meta/<app>/<role>/<run>.json.gz`, encrypted like everything else,
so a restore on a new machine (no state folder) still knows owners, modes, mtimes and which files existed."""

from __future__ import annotations

import gzip
import tempfile
from pathlib import Path

from homelab.backup import tree
from homelab.backup.context import BackupError, Context
from homelab.backup.records import DatasetRun, LastGood
from homelab.plan import Dataset

SUFFIX = ".json.gz"


def upload(ctx: Context, run_id: str, d: Dataset, entry: DatasetRun, entries: list[tree.Entry]) -> None:
    """Upload the listing unless it is the one the last successful run already left there."""
    fingerprint = tree.fingerprint(entries)
    previous = ctx.last_success(d.key, entry.remote)
    if previous and previous.entry.tree_fingerprint == fingerprint and previous.entry.tree:
        entry.tree, entry.tree_fingerprint = previous.entry.tree, fingerprint
        return
    name = f"meta/{d.key}/{run_id}{SUFFIX}"
    try:
        ctx.rclone.copyto(str(ctx.state.root / entry.manifest), ctx.remote_path(entry.remote, name))
    except Exception as exc:
        entry.result, entry.error = "failed", f"upload of the file listing failed: {exc}"
        return
    entry.tree, entry.tree_fingerprint = name, fingerprint


def runs_with_listing(ctx: Context, d: Dataset, remote: str) -> list[str]:
    """The runs that left a listing of `d` on the remote (each run whose listing changed), oldest first."""
    found = ctx.rclone.list_files(ctx.remote_path(remote, "meta", d.key))
    return sorted(n.removesuffix(SUFFIX) for n in found if n.endswith(SUFFIX))


def fetch(ctx: Context, d: Dataset, remote: str, run_id: str) -> list[tree.Entry]:
    with tempfile.TemporaryDirectory(dir=ctx.state.scratch) as scratch:
        local = Path(scratch) / "tree.json.gz"
        ctx.rclone.copyto(ctx.remote_path(remote, "meta", d.key, f"{run_id}{SUFFIX}"), str(local))
        return tree.loads(gzip.decompress(local.read_bytes()))


def latest(ctx: Context, d: Dataset, remote: str, recorded: LastGood | None) -> list[tree.Entry]:
    """The listing of the backup in `current/`: from the state folder, else the newest one on the remote."""
    if recorded and ctx.state.has(recorded.entry.manifest):
        return ctx.state.manifest(recorded.entry.manifest)
    listed = runs_with_listing(ctx, d, remote)
    if not listed:
        raise BackupError(f"no file listing of {d.key} on {remote} (meta/{d.key}/): owners and modes unknown")
    return fetch(ctx, d, remote, listed[-1])
