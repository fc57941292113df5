"""`backup run`: per dataset and remote, snapshot -> read it -> `rclone sync` to `<crypt>:current/<app>/<role>`
with `--backup-dir <crypt>:archive/<run>/<app>/<role>` (what a run replaces or deletes is kept there) ->
cryptcheck of the objects this run wrote, batch by batch while the sync writes the rest -> the snapshot's
listing (owners, modes, mtimes), kept here and on the remote -> a typed record -> prune by the retention
policy. Leftover `.partial` uploads of an interrupted run are removed first. Names rclone cannot carry
exactly (homelab.backup.names) fail the dataset before anything is uploaded, each named.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC
from pathlib import Path

from homelab.backup import listing, lock, names, retention, tree
from homelab.backup.check import CheckAsWritten
from homelab.backup.context import BackupError, Context, Say, quiet
from homelab.backup.prune import prune
from homelab.backup.records import DatasetRun, Run, Running
from homelab.backup.repair import damaged as repair_of
from homelab.backup.repair import deep_check
from homelab.plan import Dataset
from homelab.runtime.rclone import ProgressFn

PARTIAL_GLOB = "*.????????.partial"
Reporter = Callable[[str], ProgressFn | None]


@dataclass(frozen=True)
class Options:
    progress: Reporter | None = None
    say: Say = quiet
    deep: bool = False  # cryptcheck every object, not only those this run wrote (homelab.backup.repair)


@dataclass
class RunReport:
    record: Run
    failures: list[str]


def _new_run(ctx: Context, datasets: list[Dataset]) -> Run:
    start = ctx.clock()
    base = start.astimezone(UTC).strftime(retention.STAMP)
    run_id, n = base, 0
    # a snapshot of the same second (`backup snapshot`) would make ours fail: its name is taken too
    taken = ctx.state.run_ids() | {
        name.removeprefix(retention.PREFIX) for d in datasets for name in ctx.snapshots.names(d.name)
    }
    while run_id in taken:
        n += 1
        run_id = f"{base}-{n}"
    snapshot = retention.PREFIX + run_id
    ctx.state.mark_running(Running(pid=os.getpid(), run=run_id, snapshots={d.name: snapshot for d in datasets}))
    return Run(id=run_id, start=start, snapshot=snapshot, remotes=ctx.remotes, pid=os.getpid())


def _settle_previous(ctx: Context, run_id: str) -> None:
    """A run recorded as running that is not this one died (kill -9, power): record it as interrupted, and
    remove what its uploads left half-written."""
    previous = [r for r in ctx.state.runs() if r.id != run_id]
    for dead in (r for r in previous if r.result == "running"):
        dead.result, dead.error = "interrupted", dead.error or "the process ended before the run finished"
        ctx.state.save_run(dead)
    if previous and previous[-1].result != "success":
        for remote in ctx.remotes:
            # `<name>.<8 hex>.partial`: rclone writes to a temporary name and renames when complete
            ctx.rclone.delete_matching(ctx.remote_path(remote, "current"), PARTIAL_GLOB)


def run_backup(
    ctx: Context,
    only: list[str] | None = None,
    progress: Reporter | None = None,
    say: Say = quiet,
    *,
    deep: bool = False,
) -> RunReport:
    """Back up every selected dataset to every remote; raise BackupError naming each failure."""
    datasets = ctx.select(only)
    options = Options(progress, say, deep)
    with ctx.state.lock():
        record = _new_run(ctx, datasets)
        ctx.state.save_run(record)
        failures: list[str] = []
        try:
            with lock.holding(ctx.state.root, [d.name for d in datasets], record.id):
                _settle_previous(ctx, record.id)
                for d in datasets:
                    failures += _dataset(ctx, record, d, options)
        except Exception as exc:
            failures.append(str(exc))
            raise
        finally:
            _finish(ctx, record, failures)
        for d in datasets:
            for name in prune(ctx, d):
                say(f"pruned {d.name}@{name}")
    if failures:
        raise BackupError("backup failed: " + "; ".join(failures))
    return RunReport(record, failures)


def _finish(ctx: Context, record: Run, failures: list[str]) -> None:
    end = ctx.clock()
    record.end, record.duration = end, round((end - record.start).total_seconds(), 3)
    record.result = "failed" if failures else "success"
    record.error = "; ".join(failures) or None
    record.pid = None
    ctx.state.save_run(record)
    ctx.state.clear_running()
    if not failures:
        for remote in ctx.remotes:
            ctx.state.mark_success(remote, int(end.timestamp()))


def _dataset(ctx: Context, record: Run, d: Dataset, options: Options) -> list[str]:
    say = options.say
    ctx.snapshots.clean_stale_clones(d.name)
    ctx.snapshots.snapshot(d.name, record.snapshot)
    say(f"snapshot {d.name}@{record.snapshot}")
    with ctx.snapshots.open(d.name, record.snapshot, ctx.state.mounts) as source:
        entries = tree.scan(source)
        refused = names.problems(entries)
        manifest = ctx.state.save_manifest(record.id, d.key, entries)
        if refused:
            synced = [(remote, _refused(d, remote, refused)) for remote in ctx.remotes]
        else:
            synced = [
                (remote, _sync_one(ctx, record.id, d, remote, source, entries, options)) for remote in ctx.remotes
            ]
    failures = []
    files, size = len(tree.rclone_names(entries)), tree.total_bytes(entries)
    for remote, entry in synced:
        entry.files, entry.bytes, entry.manifest, entry.snapshot = files, size, manifest, record.snapshot
        if entry.ok:
            listing.upload(ctx, record.id, d, entry, entries)
        record.datasets.append(entry)
        record.files += files
        record.bytes += size
        record.transferred_bytes += entry.transferred_bytes
        if not entry.ok:
            failures.append(f"{d.key} -> {remote}: {entry.error}")
        say(
            f"{entry.result:7} {d.key} -> {remote}: {files} files, "
            f"{entry.transferred_files} written, {entry.checked_files} cryptchecked"
        )
    return failures


def _refused(d: Dataset, remote: str, refused: list[str]) -> DatasetRun:
    more = f" (and {len(refused) - 5} more)" if len(refused) > 5 else ""
    error = "names the backup cannot keep exactly, nothing uploaded: " + "; ".join(refused[:5]) + more
    return DatasetRun(dataset=d.name, key=d.key, remote=remote, result="failed", error=error)


def _sync_one(
    ctx: Context, run_id: str, d: Dataset, remote: str, source: Path, entries: list[tree.Entry], options: Options
) -> DatasetRun:
    dst, archive = ctx.remote_path(remote, "current", d.key), ctx.remote_path(remote, "archive", run_id, d.key)
    label = f"{run_id}-{remote}-{d.key.replace('/', '_')}"
    repair = repair_of(ctx, d.key, remote)
    if repair:
        ctx.rclone.delete_files(dst, repair, label=f"{label}-repair")
        options.say(f"repair  {d.key} -> {remote}: {len(repair)} objects the last verify found damaged or missing")
    reporter = options.progress(f"{d.key} -> {remote}") if options.progress else None
    checker = CheckAsWritten(ctx.rclone, source, dst, label)
    sync = ctx.rclone.sync(
        source, dst, backup_dir=archive, label=f"{label}-sync", progress=reporter, on_copied=checker.add
    )
    check = checker.finish(sync.copied)
    done = getattr(reporter, "done", None)
    if done is not None:
        done()
    entry = DatasetRun(
        dataset=d.name, key=d.key, remote=remote, transferred_files=len(sync.copied), transferred_bytes=sync.stats.bytes
    )
    if not sync.ok:
        entry.result, entry.error = "failed", sync.why("sync")
        if not sync.timed_out:  # a remote that stopped answering would only make the run wait longer
            listing.upload_partial(ctx, run_id, d, entry, entries, check.differ + check.missing)
        return entry
    entry.checked_files = check.matched
    if options.deep and not check.problems:
        check, again = deep_check(ctx, source, dst, archive, label)
        entry.checked_files, entry.transferred_files = check.matched, entry.transferred_files + again
    if check.problems:
        entry.result, entry.error = "failed", "cryptcheck: " + "; ".join(check.problems[:10])
    return entry
