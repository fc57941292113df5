"""`backup run`: per dataset and remote, snapshot -> read it -> `rclone sync` to `<crypt>:current/<app>/<role>`
with `--backup-dir <crypt>:archive/<run>/<app>/<role>` (what a run replaces or deletes is kept there) ->
each object written checked (by crypt's hash comparison as it uploads, else cryptchecked batch by batch
while the sync writes the rest: _sync_part) -> the snapshot's
listing (owners, modes, mtimes), kept here and on the remote -> a typed record -> prune by the retention
policy. Leftover `.partial` uploads of an interrupted run are removed first. Names the remote cannot hold
(homelab.backup.names) are left out of that sync and uploaded under derived names by a second one, into
`current/<app>/<role>/.homelab-names` with the same archive.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC
from pathlib import Path

from homelab.backup import bundle, databases, listing, lock, names, retention, sentinel, tree
from homelab.backup.check import CheckAsWritten, Part, absorb_part
from homelab.backup.context import BackupError, Context, Say, quiet
from homelab.backup.prune import prune
from homelab.backup.records import DatasetRun, Run, Running
from homelab.backup.repair import damaged as repair_of
from homelab.backup.repair import deep_check
from homelab.plan import build_plan
from homelab.plan_model import Dataset
from homelab.runtime.rclone import CheckResult, ProgressFn, RcloneError, Result

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
                lock.wait_for_upgrades(ctx.state.root, [d.name for d in datasets], say)  # no snapshot under one
                _settle_previous(ctx, record.id)
                written = _sentinels(ctx, datasets, record)
                for d in datasets:
                    failures += _dataset(ctx, record, d, options)
                if not failures:  # last: the newest bundle always belongs to a complete run
                    failures += _bundle(ctx, record, written, say)
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


def _sentinels(ctx: Context, datasets: list[Dataset], record: Run) -> list[sentinel.Sentinel]:
    """Before any snapshot: each app's sentinel, and a row in each running database (homelab.backup.sentinel)."""
    if not ctx.backup.sentinels:
        return []
    servers = databases.servers(build_plan(ctx.loaded), ctx.loaded.base_dir) if ctx.engine else []
    return sentinel.write_all(datasets, record.id, int(record.start.timestamp()), ctx.engine, servers)


def _bundle(ctx: Context, record: Run, written: list[sentinel.Sentinel], say: Say) -> list[str]:
    try:
        data = bundle.build(ctx, record.id, ctx.engine, ctx.crypt_secrets, written)
        record.bundle = bundle.upload(ctx, record.id, data)
    except (BackupError, RcloneError, OSError) as exc:
        return [f"recovery bundle: {exc}"]
    say(f"bundle  {record.bundle}: {len(data) >> 10} KiB (config, secrets, certificates, dumps)")
    return []


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
    # beside the run's own thread: the manifest written while the sync uploads, the listings uploaded while
    # the snapshot's read clone is destroyed (neither reads the snapshot)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="backup-beside") as beside:
        with ctx.snapshots.open(d.name, record.snapshot, ctx.state.mounts) as source:
            entries = names.assign(tree.scan(source))  # first: it also warms the cache rclone then lists from
            saving = beside.submit(ctx.state.save_manifest, record.id, d.key, entries)
            synced = [(r, _sync_one(ctx, record.id, d, r, source, entries, options)) for r in ctx.remotes]
            manifest = saving.result()
            files, size = sum(e.kind != "d" for e in entries), tree.total_bytes(entries)
            for _, entry in synced:
                entry.files, entry.bytes, entry.manifest, entry.snapshot = files, size, manifest, record.snapshot
            uploading = beside.submit(_upload_listings, ctx, record.id, d, [e for _, e in synced], entries)
        uploading.result()
    failures = []
    for remote, entry in synced:
        record.datasets.append(entry)
        record.files += files
        record.bytes += size
        record.transferred_bytes += entry.transferred_bytes
        if not entry.ok:
            failures.append(f"{d.key} -> {remote}: {entry.error}")
        derived = f", {entry.derived_files} under derived names" if entry.derived_files else ""
        say(
            f"{entry.result:7} {d.key} -> {remote}: {files} files{derived}, "
            f"{entry.transferred_files} written, {entry.checked_files} checked"
        )
    return failures


def _upload_listings(
    ctx: Context, run_id: str, d: Dataset, synced: list[DatasetRun], entries: list[tree.Entry]
) -> None:
    for entry in synced:
        if entry.ok:
            listing.upload(ctx, run_id, d, entry, entries)


def _previous_derived(ctx: Context, run_id: str, key: str, remote: str, dst: str) -> bool:
    """Whether `.homelab-names` on the remote may hold objects (which this run's derived-name sync then moves to
    its archive if no entry points at them). It holds none for sure only when the last successful run left
    none and nothing since may have: no run after it (a failed or killed one may have written some whatever
    its record says) and no failed verify (it may have found a stray one). Else the remote is asked."""
    last = ctx.last_success(key, remote)
    if last is not None and last.entry.derived_files:
        return True
    if last is not None:
        runs = [r.id for r in ctx.state.runs() if r.id != run_id]
        since = runs[runs.index(last.run) + 1 :]
        failed_verify = any(
            v.result != "success" and (last.end is None or v.time >= last.end) for v in ctx.state.verifies()
        )
        if not since and not failed_verify:
            return False
    return names.on_remote(ctx.rclone, dst)


def _newly_derived(ctx: Context, key: str, remote: str, entries: list[tree.Entry]) -> list[str]:
    """Objects stored under their own name by the last successful run whose name now needs a derived one (a
    twin appeared): the sync leaves such names alone, so they are moved to this run's archive first."""
    now = {e.path for e in names.derived(entries)}
    last = ctx.last_success(key, remote)
    if not now or last is None or not ctx.state.has(last.entry.manifest):
        return []
    before = ctx.state.manifest(last.entry.manifest)
    return [e.rclone_name for e in before if e.has_object and not e.stored_as and e.path in now]


def _sync_one(
    ctx: Context, run_id: str, d: Dataset, remote: str, source: Path, entries: list[tree.Entry], options: Options
) -> DatasetRun:
    dst, archive = ctx.remote_path(remote, "current", d.key), ctx.remote_path(remote, "archive", run_id, d.key)
    label = f"{run_id}-{remote}-{d.key.replace('/', '_')}"
    repair = repair_of(ctx, d.key, remote)
    if repair:
        ctx.rclone.delete_files(dst, repair, label=f"{label}-repair")
        options.say(f"repair  {d.key} -> {remote}: {len(repair)} objects the last verify found damaged or missing")
    renamed = _newly_derived(ctx, d.key, remote, entries)
    if renamed:
        ctx.rclone.move_files(dst, archive, renamed, label=f"{label}-rename")
    derived = sum(e.has_object for e in names.derived(entries))
    entry = DatasetRun(dataset=d.name, key=d.key, remote=remote, derived_files=derived)
    previous = not derived and _previous_derived(ctx, run_id, d.key, remote, dst)
    reporter = options.progress(f"{d.key} -> {remote}") if options.progress else None
    check = CheckResult()
    with names.stage(entries, source, ctx.state.scratch) as staged:
        parts = [(Part(source, dst, archive, tuple(names.skipped(entries))), "", reporter)]
        if derived or previous:  # none now: the sync of an empty folder moves any left to the archive
            folder = names.FOLDER
            parts.append((Part(staged, f"{dst}/{folder}", f"{archive}/{folder}", follow_links=True), folder, None))
        for part, prefix, progress in parts:
            part_label = f"{label}-names" if prefix else label
            sync, checked = _sync_part(ctx, part, part_label, progress)
            entry.transferred_files += len(sync.copied)
            entry.transferred_bytes += sync.stats.bytes
            if sync.ok and options.deep and not checked.problems:
                checked, again = deep_check(ctx, part, part_label)
                entry.transferred_files += again
            absorb_part(check, checked, prefix)
            if not sync.ok:
                entry.result, entry.error = "failed", sync.why("sync")
                if not sync.timed_out:  # a remote that stopped answering would only make the run wait longer
                    listing.upload_partial(ctx, run_id, d, entry, entries, check.differ + check.missing)
                break
            if checked.problems:
                entry.result, entry.error = "failed", "cryptcheck: " + "; ".join(check.problems[:10])
                break
    done = getattr(reporter, "done", None)
    if done is not None:
        done()
    entry.checked_files = check.matched
    return entry


def _sync_part(ctx: Context, part: Part, label: str, progress: ProgressFn | None) -> tuple[Result, CheckResult]:
    """Sync one part. Each object written is checked: by crypt as it uploads (the hash of the encrypted bytes
    sent against the hash the remote gives for what it stored: rclone_log._HASH_OK), else - the remote gave
    no hash - by a cryptcheck, while the sync writes the others (which fails when it finds no hash either)."""
    checker = CheckAsWritten(ctx.rclone, part, label)
    sync = part.sync(ctx.rclone, f"{label}-sync", progress, checker.add)
    checked = checker.finish(sync.unverified)
    checked.matched += len(sync.copied) - len(sync.unverified)
    return sync, checked
