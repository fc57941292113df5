"""The snapshot's listing on the remote: `meta/<app>/<role>/<run>.json.gz`, encrypted like everything else,
so a restore on a new machine (no state folder) still knows owners, modes, mtimes and which files existed.

A run whose sync did not finish (the sync killed, failed, stalled) leaves, if the remote still answers,
`meta/<app>/<role>/<run>.partial.json.gz`: only the entries whose object on the remote is this snapshot's
(same size and mtime, not found damaged by the run's check), and the paths that did not make it; a restore
of that run restores exactly those and says what is missing. Where each object of a run is now: `sources`.
"""

from __future__ import annotations

import gzip
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from homelab.backup import names, tree
from homelab.backup.context import BackupError, Context
from homelab.backup.records import DatasetRun, LastGood
from homelab.plan_model import Dataset

SUFFIX = ".json.gz"
PARTIAL = ".partial"
MTIME_SLACK_NS = 1_000_000_000  # sftp and webdav keep whole seconds


class Listed(NamedTuple):
    """A listing on the remote: the run that left it, and whether that run's sync finished."""

    run: str
    partial: bool = False

    @property
    def name(self) -> str:
        return self.run + (PARTIAL if self.partial else "") + SUFFIX


@dataclass
class Listing:
    run: str
    entries: list[tree.Entry]
    missing: list[str] = field(default_factory=list)  # a partial run's paths that never reached the remote


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


def _arrived(e: tree.Entry, found: tuple[int, int] | None) -> bool:
    if found is None:
        return False
    size = e.size if e.kind == "f" else len(os.fsencode(e.target))  # a .rclonelink holds the target
    return found[0] == size and abs(found[1] - e.mtime_ns) < MTIME_SLACK_NS


def upload_partial(
    ctx: Context, run_id: str, d: Dataset, entry: DatasetRun, entries: list[tree.Entry], damaged: list[str]
) -> None:
    """After a sync that did not finish: list what is on the remote now and upload the listing of what of this
    snapshot made it. A remote that no longer answers gets none (the run's error says why)."""
    try:
        found = ctx.rclone.list_objects(ctx.remote_path(entry.remote, "current", d.key))
    except Exception:
        return
    bad = set(damaged)
    kept, missing = [], []
    for e in entries:
        if not e.has_object or (e.rclone_name not in bad and _arrived(e, found.get(e.rclone_name))):
            kept.append(e)
        else:
            missing.append(e.path)
    name = f"meta/{d.key}/{Listed(run_id, partial=True).name}"
    data = json.dumps({"version": 1, "entries": [list(e) for e in kept], "missing": missing}).encode()
    with tempfile.TemporaryDirectory(dir=ctx.state.scratch) as scratch:
        local = Path(scratch) / "partial.json.gz"
        local.write_bytes(gzip.compress(data, mtime=0))
        try:
            ctx.rclone.copyto(str(local), ctx.remote_path(entry.remote, name))
        except Exception:
            return
    entry.tree, entry.partial_files = name, len(kept) - sum(e.kind == "d" for e in kept)
    entry.error = (
        f"{entry.error} (partial: {entry.partial_files} of {entry.partial_files + len(missing)} files of this snapshot "
        f"are on the remote; their listing is {name}: `restore --at` a time after the run started restores them)"
    )


def runs_with_listing(ctx: Context, d: Dataset, remote: str) -> list[Listed]:
    """The runs that left a listing of `d` on the remote (each run whose listing changed), oldest first."""
    return _listed(ctx.rclone.list_files(ctx.remote_path(remote, "meta", d.key)))


def every_listing(ctx: Context, remote: str) -> dict[str, list[Listed]]:
    """runs_with_listing of every dataset on the remote, from one recursive listing of `meta/`."""
    by_key: dict[str, list[str]] = {}
    for name in ctx.rclone.list_files(ctx.remote_path(remote, "meta"), recursive=True):
        key, _, file = name.rpartition("/")
        by_key.setdefault(key, []).append(file)
    return {key: _listed(files) for key, files in by_key.items()}


def _listed(files: list[str]) -> list[Listed]:
    listed = []
    for n in (n.removesuffix(SUFFIX) for n in files if n.endswith(SUFFIX)):
        listed.append(Listed(n.removesuffix(PARTIAL), n.endswith(PARTIAL)))
    return sorted(listed)


def fetch(ctx: Context, d: Dataset, remote: str, listed: Listed) -> Listing:
    with tempfile.TemporaryDirectory(dir=ctx.state.scratch) as scratch:
        local = Path(scratch) / "tree.json.gz"
        ctx.rclone.copyto(ctx.remote_path(remote, "meta", d.key, listed.name), str(local))
        data = gzip.decompress(local.read_bytes())
    return Listing(listed.run, tree.loads(data), json.loads(data).get("missing", []))


def latest(ctx: Context, d: Dataset, remote: str, recorded: LastGood | None) -> Listing:
    """The listing of the last complete backup: from the state folder, else the newest complete one on the
    remote; a partial one only when no run ever finished."""
    if recorded and ctx.state.has(recorded.entry.manifest):
        return Listing(recorded.run, ctx.state.manifest(recorded.entry.manifest))
    listed = runs_with_listing(ctx, d, remote)
    if not listed:
        raise BackupError(f"no file listing of {d.key} on {remote} (meta/{d.key}/): owners and modes unknown")
    complete = [n for n in listed if not n.partial]
    return fetch(ctx, d, remote, complete[-1] if complete else listed[-1])


def archived_runs(ctx: Context, remote: str) -> list[str]:
    """The runs that left an archive (what they replaced in `current/`), oldest first."""
    return sorted(n.rstrip("/") for n in ctx.rclone.list_dirs(ctx.remote_path(remote, "archive")))


def sources(
    ctx: Context, d: Dataset, remote: str, run_id: str, wanted: list[str], archived: list[str] | None = None
) -> dict[str, list[str]]:
    """Where each wanted object of run `run_id` is now: the first later run's archive holding it (a later run,
    finished or not, moved the version it replaced there), else `current/`. `archived`: archived_runs, when
    the caller listed them already."""
    found: dict[str, list[str]] = {}
    remaining = set(wanted)
    later_runs = archived if archived is not None else archived_runs(ctx, remote)
    for later in (n for n in later_runs if n > run_id):
        if not remaining:
            break
        root = ctx.remote_path(remote, "archive", later, d.key)
        hits = sorted(remaining & set(ctx.rclone.list_files(root, recursive=True)))
        if hits:
            found[root] = hits
            remaining -= set(hits)
    if remaining:
        found[ctx.remote_path(remote, "current", d.key)] = sorted(remaining)
    return found


def download(
    ctx: Context,
    d: Dataset,
    remote: str,
    run_id: str,
    wanted: list[tree.Entry],
    target: Path,
    label: str,
    found: dict[str, list[str]] | None = None,
) -> int:
    """The objects of `wanted` as of run `run_id` into target, each derived one moved to its real name and
    each derived symlink made; how many objects rclone copied. A copy that fails raises BackupError; an object
    that did not come back is for the caller's comparison with the listing (tree.differences) to name.
    `found`: where the objects are, when the caller looked already (`sources`)."""
    files = 0
    where = found if found is not None else sources(ctx, d, remote, run_id, tree.rclone_names(wanted))
    for root, objects in where.items():
        result = ctx.rclone.copy(root, target, label=label, files=objects)
        if not result.ok:
            raise BackupError(f"restore of {d.key} as of {run_id} failed: {result.why('copy')}")
        files += result.stats.transfers
    names.place(target, wanted)
    return files
