"""Backup, verify, restore, drill, prune and status: the library the `homelab backup` commands call.

A run, per dataset and remote: snapshot -> read it (`.zfs/snapshot` or a read-only clone) -> `rclone sync`
to `<crypt>:current/<app>/<role>` with `--backup-dir <crypt>:archive/<run>/<app>/<role>` (what a run
replaces or deletes is kept there) -> `cryptcheck` of the objects this run wrote, batch by batch while
the sync writes the rest -> the snapshot's listing (owners, modes, mtimes) -> a JSON record ->
prune snapshots by the retention policy. Leftover `.partial` uploads of an interrupted run are removed
first. `verify` cryptchecks everything against the snapshot of the last successful run.
"""

from __future__ import annotations

import gzip
import hashlib
import itertools
import os
import random
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from homelab.backup import retention, tree, zfs
from homelab.backup.rclone import ENOSPC_MARKERS, BackupError, Rclone, Result, Stats, crypt_name
from homelab.backup.state import State, write_json
from homelab.config.loader import LoadedConfig
from homelab.errors import ConfigError
from homelab.plan import Dataset, build_plan
from homelab.secrets import generate, user_secret_values

STATE_ENV = "HOMELAB_BACKUP_STATE"
GENERATED_PASSWORD = "secrets/backup-crypt-password"  # noqa: S105 - a path, not a value
GENERATED_SALT = "secrets/backup-crypt-salt"
FULL_DRILL_EVERY = timedelta(days=30)
PARTIAL_GLOB = "*.????????.partial"
CHECK_BATCH_FILES = 2000  # objects written before a check batch starts...
CHECK_BATCH_WAIT = 2.0  # ...or seconds since the first of them was written

Clock = Callable[[], datetime]


def utcnow() -> datetime:
    return datetime.now(UTC)


def _iso(t: datetime) -> str:
    return t.astimezone(UTC).isoformat(timespec="seconds")


def _parse_iso(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


def default_state_dir(loaded: LoadedConfig) -> Path:
    explicit = os.environ.get(STATE_ENV)
    if explicit:
        return Path(explicit)
    return Path(loaded.config.backup_state_dir)


def _secret(loaded: LoadedConfig, named: str | None, generated: str, notes: list[str]) -> str:
    if named:
        return loaded.secret_path(named).read_text(encoding="utf-8").rstrip("\r\n")
    path = loaded.base_dir / generated
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(generate() + "\n")
        notes.append(f"generated {path}: keep a copy somewhere safe, without it the backup cannot be read")
    return path.read_text(encoding="utf-8").rstrip("\r\n")


@dataclass
class Context:
    """Everything a backup command needs, built once from the validated config."""

    loaded: LoadedConfig
    datasets: list[Dataset]
    state: State
    rclone: Rclone
    remotes: list[str]
    clock: Clock = utcnow
    notes: list[str] = field(default_factory=list)

    @property
    def policy(self) -> retention.Policy:
        r = self.loaded.config.backup.retention  # type: ignore[union-attr]
        return retention.Policy(r.hourly, r.daily, r.monthly)

    def select(self, only: list[str] | None) -> list[Dataset]:
        if not only:
            return self.datasets
        chosen = [d for d in self.datasets if d.key in only or d.name in only]
        unknown = set(only) - {d.key for d in chosen} - {d.name for d in chosen}
        if unknown:
            known = ", ".join(d.key for d in self.datasets)
            raise ConfigError([f"not a backed-up dataset: {', '.join(sorted(unknown))} (known: {known})"])
        return chosen

    def remote_path(self, remote: str, *parts: str) -> str:
        return f"{crypt_name(remote)}:" + "/".join(p.strip("/") for p in parts if p)


def context(
    loaded: LoadedConfig, *, state_dir: Path | None = None, clock: Clock = utcnow, remote: str | None = None
) -> Context:
    config = loaded.config
    if config.backup is None or not config.backup.enabled:
        raise ConfigError([f"{loaded.path}: backup: not configured (add a backup section with a remote)"])
    backup = config.backup
    plan = build_plan(loaded)
    wanted = set(backup.datasets) if backup.datasets is not None else None
    datasets = [d for d in plan.datasets if (d.key in wanted if wanted is not None else d.backup)]
    if wanted:
        unknown = wanted - {d.key for d in plan.datasets}
        if unknown:
            raise ConfigError([f"backup.datasets: unknown dataset role(s): {', '.join(sorted(unknown))}"])
    remotes = sorted(backup.remotes)
    if remote:
        if remote not in backup.remotes:
            raise ConfigError([f"no backup remote named {remote!r} (configured: {', '.join(remotes)})"])
        remotes = [remote]
    state = State(state_dir or default_state_dir(loaded))
    state.ensure()
    notes: list[str] = []
    password = _secret(loaded, backup.crypt_password_file, GENERATED_PASSWORD, notes)
    salt = _secret(loaded, backup.crypt_salt_file, GENERATED_SALT, notes)
    values = user_secret_values(loaded)
    secret_options = {name: {k: values[v] for k, v in r.secret_options.items()} for name, r in backup.remotes.items()}
    rclone = Rclone(state.rclone_config, state.logs)
    rclone.write_config(backup.remotes, secret_options, password, salt)
    return Context(loaded, datasets, state, rclone, remotes, clock, notes)


# --- files -------------------------------------------------------------------------


def digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# --- run -----------------------------------------------------------------------------------------


@dataclass
class RunReport:
    record: dict[str, Any]
    failures: list[str]


def _new_run_id(ctx: Context) -> tuple[str, datetime]:
    start = ctx.clock()
    base = start.astimezone(UTC).strftime(retention.STAMP)
    run_id, n = base, 0
    taken = ctx.state.run_ids()
    while run_id in taken:
        n += 1
        run_id = f"{base}-{n}"
    return run_id, start


def _clean_partials(ctx: Context, remote: str) -> None:
    """An interrupted upload leaves `<name>.<8 hex>.partial` (rclone >= 1.63 writes to a temporary name and
    renames when complete; through crypt that temporary name is encrypted too): remove them before syncing."""
    ctx.rclone.run(["delete", ctx.remote_path(remote, "current"), "--include", PARTIAL_GLOB], check=False)


def run_backup(
    ctx: Context,
    only: list[str] | None = None,
    progress: Callable[[str], Callable[[Stats], None] | None] | None = None,
    say: Callable[[str], None] = lambda _: None,
) -> RunReport:
    """Back up every selected dataset to every remote; raise BackupError naming each failure."""
    datasets = ctx.select(only)
    with ctx.state.lock():
        run_id, start = _new_run_id(ctx)
        snapshot = retention.PREFIX + run_id
        record: dict[str, Any] = {
            "id": run_id,
            "start": _iso(start),
            "end": None,
            "result": "running",
            "snapshot": snapshot,
            "remotes": ctx.remotes,
            "datasets": [],
            "bytes": 0,
            "files": 0,
            "transferred_bytes": 0,
            "error": None,
        }
        ctx.state.save_run(record)
        write_json(
            ctx.state.running_path,
            {"pid": os.getpid(), "run": run_id, "snapshots": {d.name: snapshot for d in datasets}},
        )
        failures: list[str] = []
        try:
            previous = [r for r in ctx.state.runs() if r["id"] != run_id]
            if previous and previous[-1]["result"] != "success":  # interrupted or failed: leftovers possible
                for remote in ctx.remotes:
                    _clean_partials(ctx, remote)
            for d in datasets:
                zfs.clean_stale_clones(d.name)
                zfs.snapshot(d.name, snapshot)
                say(f"snapshot {d.name}@{snapshot}")
                with (
                    zfs.open_snapshot(d.name, snapshot, ctx.state.mounts) as source,
                    ThreadPoolExecutor(1) as background,
                ):
                    scanning = background.submit(tree.scan, source)  # while rclone syncs: both mostly wait
                    synced = [(remote, _sync_one(ctx, run_id, d, remote, source, progress)) for remote in ctx.remotes]
                    entries = scanning.result()
                    manifest = ctx.state.save_manifest(run_id, d.key, entries)
                    names, size = tree.rclone_names(entries), tree.total_bytes(entries)
                    for remote, entry in synced:
                        entry.update(files=len(names), bytes=size, manifest=manifest, snapshot=snapshot)
                        if entry["result"] == "success":
                            _upload_tree(ctx, run_id, d, remote, entry, entries)
                        record["datasets"].append(entry)
                        record["files"] += len(names)
                        record["bytes"] += size
                        record["transferred_bytes"] += entry["transferred_bytes"]
                        if entry["result"] != "success":
                            failures.append(f"{d.key} -> {remote}: {entry['error']}")
                        say(
                            f"{entry['result']:7} {d.key} -> {remote}: {len(names)} files, "
                            f"{entry['transferred_files']} written, {entry['checked_files']} cryptchecked"
                        )
        except Exception as exc:
            failures.append(str(exc))
            raise
        finally:
            end = ctx.clock()
            record["end"] = _iso(end)
            record["duration"] = round((end - start).total_seconds(), 3)
            record["result"] = "failed" if failures else "success"
            record["error"] = "; ".join(failures) or None
            ctx.state.save_run(record)
            ctx.state.running_path.unlink(missing_ok=True)
            if not failures:
                for remote in ctx.remotes:
                    ctx.state.mark_success(remote, int(end.timestamp()))
        for d in datasets:
            for name in prune(ctx, d):
                say(f"pruned {d.name}@{name}")
    if failures:
        raise BackupError("backup failed: " + "; ".join(failures))
    return RunReport(record, failures)


def _sync_one(
    ctx: Context,
    run_id: str,
    d: Dataset,
    remote: str,
    source: Path,
    progress: Callable[[str], Callable[[Stats], None] | None] | None,
) -> dict[str, Any]:
    dst = ctx.remote_path(remote, "current", d.key)
    archive = ctx.remote_path(remote, "archive", run_id, d.key)
    label = f"{run_id}-{remote}-{d.key.replace('/', '_')}"
    reporter = progress(f"{d.key} -> {remote}") if progress else None
    checker = _CheckAsWritten(ctx, source, dst, label)
    sync = ctx.rclone.logged(
        [
            "sync",
            str(source),
            dst,
            "--backup-dir",
            archive,
            "--links",
            "--create-empty-src-dirs",
            "--transfers",
            "4",
            "--checkers",
            "8",
        ],
        f"{label}-sync",
        reporter,
        on_copied=checker.add,
    )
    check = checker.finish(sync.copied)
    if reporter is not None and hasattr(reporter, "done"):
        reporter.done()
    entry: dict[str, Any] = {
        "dataset": d.name,
        "key": d.key,
        "remote": remote,
        "result": "success",
        "error": None,
        "transferred_files": len(sync.copied),
        "transferred_bytes": sync.stats.bytes,
        "checked_files": 0,
    }
    if not sync.ok:
        entry.update(result="failed", error=_why(sync, "sync"))
        return entry
    entry["checked_files"] = check.matched
    if check.problems:
        entry.update(result="failed", error="cryptcheck: " + "; ".join(check.problems[:10]))
    return entry


class _CheckAsWritten:
    """cryptcheck the objects a sync has finished writing while it writes the others.

    Each batch is what was written since the previous batch started, so on a slow uplink the check costs
    no wall time, and the last batch is small. `finish` checks the rest and returns the merged result.
    """

    def __init__(self, ctx: Context, source: Path, dst: str, label: str):
        self.ctx, self.source, self.dst, self.label = ctx, source, dst, label
        self.result = CheckResult(0, [], [], [], [])
        self._pending: list[str] = []
        self._seen: set[str] = set()
        self._finished = False
        self._ready = threading.Condition()
        self._worker = threading.Thread(target=self._work, daemon=True)
        self._worker.start()

    def add(self, name: str) -> None:
        with self._ready:
            if name not in self._seen:
                self._seen.add(name)
                self._pending.append(name)
                self._ready.notify()

    def finish(self, written: list[str]) -> CheckResult:
        for name in written:  # the sync's own log, read whole: nothing the tail missed goes unchecked
            self.add(name)
        with self._ready:
            self._finished = True
            self._ready.notify()
        self._worker.join()
        return self.result

    def _work(self) -> None:
        for n in itertools.count(1):
            with self._ready:
                while not self._pending and not self._finished:
                    self._ready.wait()
                # each cryptcheck costs a start-up and a listing: wait for a batch worth it, but not long
                deadline = time.monotonic() + CHECK_BATCH_WAIT
                while not self._finished and len(self._pending) < CHECK_BATCH_FILES:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._ready.wait(left)
                if not self._pending:
                    return
                batch, self._pending = self._pending, []
            listing = self.ctx.state.logs / f"{self.label}-written-{n}.txt"
            listing.write_text("".join(f"{name}\n" for name in batch), encoding="utf-8")
            try:
                self.result.absorb(_cryptcheck(self.ctx, self.source, self.dst, f"{self.label}-check-{n}", listing))
            except Exception as exc:  # reported as a check error, never lost in the thread
                self.result.errors.append(f"cryptcheck could not run: {exc}")


def _upload_tree(
    ctx: Context, run_id: str, d: Dataset, remote: str, entry: dict[str, Any], entries: list[tree.Entry]
) -> None:
    """Keep the snapshot's listing (owners, modes, mtimes) on the remote too, encrypted: a restore on a new
    machine has no state folder. Uploaded only when it changed since the last successful run."""
    fingerprint = tree.fingerprint(entries)
    previous = last_success(ctx, d.key, remote)
    if previous and previous.get("tree_fingerprint") == fingerprint:
        entry.update(tree=previous["tree"], tree_fingerprint=fingerprint)
        return
    name = f"meta/{d.key}/{run_id}.json.gz"
    result = ctx.rclone.logged(
        ["copyto", str(ctx.state.root / entry["manifest"]), ctx.remote_path(remote, name)],
        f"{run_id}-{remote}-{d.key.replace('/', '_')}-meta",
    )
    if result.ok:
        entry.update(tree=name, tree_fingerprint=fingerprint)
    else:
        entry.update(result="failed", error=_why(result, "upload of the file listing"))


def _remote_tree(ctx: Context, d: Dataset, remote: str, recorded: dict[str, Any] | None) -> list[tree.Entry]:
    """The listing of the backup in `current/`: from the state folder, else the newest one on the remote."""
    if recorded and (ctx.state.root / recorded["manifest"]).exists():
        return ctx.state.manifest(recorded["manifest"])
    listed = _remote_listings(ctx, d, remote)
    if not listed:
        raise BackupError(f"no file listing of {d.key} on {remote} (meta/{d.key}/): owners and modes unknown")
    return _fetch_listing(ctx, d, remote, listed[-1])


def _remote_listings(ctx: Context, d: Dataset, remote: str) -> list[str]:
    """The runs that left a listing of `d` on the remote (each run whose listing changed), oldest first."""
    names = ctx.rclone.run(["lsf", "--files-only", ctx.remote_path(remote, "meta", d.key)], check=False)
    return sorted(n.removesuffix(".json.gz") for n in names.splitlines() if n.endswith(".json.gz"))


def _fetch_listing(ctx: Context, d: Dataset, remote: str, run_id: str) -> list[tree.Entry]:
    with tempfile.TemporaryDirectory(dir=ctx.state.root / "private") as scratch:
        local = Path(scratch) / "tree.json.gz"
        ctx.rclone.run(["copyto", ctx.remote_path(remote, "meta", d.key, f"{run_id}.json.gz"), str(local)])
        return tree.loads(gzip.decompress(local.read_bytes()))


def _why(result: Result, what: str) -> str:
    if result.enospc:
        first = next(e for e in result.errors if any(m in e.lower() for m in ENOSPC_MARKERS))
        return f"the remote is full (ENOSPC): {first}"
    if result.returncode < 0:
        return f"rclone {what} was killed (signal {-result.returncode})"
    first = result.errors[0] if result.errors else f"rclone exited with {result.returncode}"
    more = f" (and {len(result.errors) - 1} more errors)" if len(result.errors) > 1 else ""
    return f"{what} failed: {first}{more}"


@dataclass
class CheckResult:
    matched: int
    differ: list[str]
    missing: list[str]
    extra: list[str]
    errors: list[str]

    def absorb(self, other: CheckResult) -> None:
        self.matched += other.matched
        self.differ += other.differ
        self.missing += other.missing
        self.extra += other.extra
        self.errors += other.errors

    @property
    def problems(self) -> list[str]:
        return (
            [f"differs: {p}" for p in self.differ]
            + [f"missing on the remote: {p}" for p in self.missing]
            + [f"not in the snapshot: {p}" for p in self.extra]
            + [f"error: {p}" for p in self.errors]
        )


def _cryptcheck(ctx: Context, source: Path, dst: str, label: str, files_from: Path | None = None) -> CheckResult:
    combined = ctx.state.logs / f"{label}.combined"
    args = ["cryptcheck", str(source), dst, "--links", "--checkers", "8", "--combined", str(combined)]
    if files_from:
        args += ["--files-from-raw", str(files_from)]
    result = ctx.rclone.logged(args, label)
    out = CheckResult(0, [], [], [], [])
    if combined.exists():
        for line in combined.read_text(encoding="utf-8", errors="replace").splitlines():
            mark, _, path = line.partition(" ")  # rclone: "+" only in the source, "-" only in the destination
            {
                "=": lambda p: None,
                "*": out.differ.append,
                "+": out.missing.append,
                "-": out.extra.append,
                "!": out.errors.append,
            }.get(mark, lambda p: None)(path)
            if mark == "=":
                out.matched += 1
    if not result.ok and not (out.differ or out.missing or out.extra or out.errors):
        out.errors.append(_why(result, "cryptcheck"))
    return out


# --- verify --------------------------------------------------------------------------------------


def last_success(ctx: Context, key: str, remote: str) -> dict[str, Any] | None:
    for record in reversed(ctx.state.runs()):
        for entry in record.get("datasets", []):
            if entry["key"] == key and entry["remote"] == remote and entry["result"] == "success":
                return {**entry, "run": record["id"], "start": record["start"], "end": record["end"]}
    return None


def verify(ctx: Context, only: list[str] | None = None, say: Callable[[str], None] = lambda _: None) -> dict:
    """cryptcheck every object of the last successful backup against its snapshot."""
    problems: list[str] = []
    checked = 0
    for d in ctx.select(only):
        for remote in ctx.remotes:
            last = last_success(ctx, d.key, remote)
            if last is None:
                problems.append(f"{d.key} -> {remote}: no successful backup yet")
                continue
            with zfs.open_snapshot(d.name, last["snapshot"], ctx.state.mounts) as source:
                result = _cryptcheck(
                    ctx, source, ctx.remote_path(remote, "current", d.key), f"verify-{remote}-{d.key.replace('/', '_')}"
                )
            checked += result.matched
            problems += [f"{d.key} -> {remote}: {p}" for p in result.problems]
            say(
                f"{'ok' if not result.problems else 'FAILED':6} {d.key} -> {remote}: {result.matched} files match "
                f"snapshot {last['snapshot']}"
            )
    when = ctx.clock()
    record = {
        "id": when.strftime(retention.STAMP),
        "time": _iso(when),
        "checked": checked,
        "result": "failed" if problems else "success",
        "problems": problems,
    }
    ctx.state.save_event("verify", record)
    if problems:
        raise BackupError("verify failed:\n  " + "\n  ".join(problems))
    return record


# --- restore -------------------------------------------------------------------------------------


def restore(
    ctx: Context,
    key: str,
    to: Path,
    *,
    at: datetime | None = None,
    subpath: str | None = None,
    remote: str | None = None,
) -> dict[str, Any]:
    """Restore one dataset (or SUBPATH of it) into an empty folder, as of the latest run or of `at`."""
    (d,) = ctx.select([key])
    remote = remote or ctx.remotes[0]
    if to.exists() and any(to.iterdir()):
        raise BackupError(f"{to} is not empty: restore only into a new or empty folder")
    to.mkdir(parents=True, exist_ok=True)
    sub = (subpath or "").strip("/")
    if at is None:
        args = ["copy", ctx.remote_path(remote, "current", d.key), str(to), "--links", "--create-empty-src-dirs"]
        if sub:
            args += ["--include", f"/{sub}", "--include", f"/{sub}{tree.LINK_SUFFIX}", "--include", f"/{sub}/**"]
        result = ctx.rclone.logged(args, f"restore-{remote}-{d.key.replace('/', '_')}")
        if not result.ok:
            raise BackupError(f"restore of {d.key} failed: {_why(result, 'copy')}")
        entries = _remote_tree(ctx, d, remote, last_success(ctx, d.key, remote))
        summary = {"files": result.stats.transfers, "bytes": result.stats.bytes, "as_of": "latest"}
    else:
        summary, entries = _restore_at(ctx, d, remote, to, at, sub)
    applied = tree.apply(to, tree.under(entries, sub))
    return {
        "dataset": d.key,
        "remote": remote,
        **summary,
        "metadata": applied.entries,
        "owners": "not restored (run as root to restore owners)" if applied.owners_skipped else "restored",
    }


def _restore_at(
    ctx: Context, d: Dataset, remote: str, to: Path, at: datetime, sub: str
) -> tuple[dict[str, Any], list[tree.Entry]]:
    """Everything needed is read from the remote, so a new machine with no state folder (the pool that held
    it lost) restores any date as well as the machine that made the backups: the newest listing at or
    before `at` says which files existed then and their metadata; a file a later run replaced or deleted
    sits in that run's archive (the first later archive holding it has the version of `at`), else in
    `current/`."""
    limit = at.astimezone(UTC).strftime(retention.STAMP)
    older = [run_id for run_id in _remote_listings(ctx, d, remote) if run_id.split("-")[0] <= limit]
    if not older:
        raise BackupError(f"no backup of {d.key} on {remote} at or before {_iso(at)} (no listing in meta/{d.key}/)")
    chosen = older[-1]
    entries = _fetch_listing(ctx, d, remote, chosen)
    wanted = tree.rclone_names(tree.under(entries, sub))
    archived = ctx.rclone.run(["lsf", "--dirs-only", ctx.remote_path(remote, "archive")], check=False)
    sources: dict[str, list[str]] = {}
    remaining = set(wanted)
    for later in sorted(name.rstrip("/") for name in archived.splitlines() if name.rstrip("/") > chosen):
        if not remaining:
            break
        root = ctx.remote_path(remote, "archive", later, d.key)
        found = ctx.rclone.run(["lsf", "-R", "--files-only", root], check=False).splitlines()
        hits = sorted(remaining & set(found))
        if hits:
            sources[root] = hits
            remaining -= set(hits)
    if remaining:
        sources[ctx.remote_path(remote, "current", d.key)] = sorted(remaining)
    total = 0
    for root, files in sources.items():
        listing = ctx.state.logs / "restore-files.txt"
        listing.write_text("".join(f"{f}\n" for f in files), encoding="utf-8")
        result = ctx.rclone.logged(
            ["copy", root, str(to), "--links", "--files-from-raw", str(listing)],
            f"restore-at-{remote}-{d.key.replace('/', '_')}",
        )
        if not result.ok:
            raise BackupError(f"restore of {d.key} as of {chosen} failed: {_why(result, 'copy')}")
        total += result.stats.transfers
    return {"files": total, "as_of": chosen}, entries


# --- drill ---------------------------------------------------------------------------------------


def drill(
    ctx: Context,
    *,
    sample: int = 20,
    full: bool | None = None,
    seed: int | None = None,
    say: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """Restore a random sample (everything when a full drill is due) into scratch and compare with the snapshot."""
    now = ctx.clock()
    if full is None:
        fulls = [e for e in ctx.state.events("drills") if e.get("full") and e["result"] == "success"]
        full = not fulls or now - _parse_iso(fulls[-1]["time"]) >= FULL_DRILL_EVERY
    rng = random.Random(seed)  # noqa: S311 - picks a sample to restore, not a secret
    checked, problems = 0, []
    for d in ctx.datasets:
        for remote in ctx.remotes:
            last = last_success(ctx, d.key, remote)
            if last is None:
                problems.append(f"{d.key} -> {remote}: no successful backup to drill")
                continue
            entries = ctx.state.manifest(last["manifest"])
            objects = [e for e in entries if e.kind != "d"]
            chosen = entries if full else rng.sample(objects, min(sample, len(objects)))
            with (
                tempfile.TemporaryDirectory(prefix="drill-", dir=ctx.state.root / "private") as scratch,
                zfs.open_snapshot(d.name, last["snapshot"], ctx.state.mounts) as source,
            ):
                listing = Path(scratch) / "files.txt"
                listing.write_text("".join(f"{n}\n" for n in tree.rclone_names(chosen)), encoding="utf-8")
                target = Path(scratch) / "restored"
                result = ctx.rclone.logged(
                    [
                        "copy",
                        ctx.remote_path(remote, "current", d.key),
                        str(target),
                        "--links",
                        "--files-from-raw",
                        str(listing),
                    ],
                    f"drill-{remote}",
                )
                if not result.ok:
                    problems.append(f"{d.key} -> {remote}: {_why(result, 'restore')}")
                    continue
                tree.apply(target, chosen)
                problems += [f"{d.key}: {p}" for p in tree.differences(chosen, target)]
                for e in chosen:
                    got, want = target / e.path, source / e.path
                    if e.kind == "f" and got.is_file() and not got.is_symlink() and digest(got) != digest(want):
                        problems.append(f"{d.key}: {e.path}: restored content differs from snapshot {last['snapshot']}")
                    checked += 1
            say(
                f"{d.key} -> {remote}: {len(chosen)} entries restored, content, owners, modes and mtimes compared "
                f"({'full' if full else 'sample'})"
            )
    record = {
        "id": now.strftime(retention.STAMP),
        "time": _iso(now),
        "full": full,
        "files": checked,
        "result": "failed" if problems else "success",
        "problems": problems,
    }
    ctx.state.save_event("drills", record)
    if problems:
        raise BackupError("drill failed:\n  " + "\n  ".join(problems[:20]))
    return record


# --- retention -----------------------------------------------------------------------------------


def protected(ctx: Context, d: Dataset) -> set[str]:
    keep: set[str] = set()
    marker = ctx.state.running()
    if marker:
        name = marker.get("snapshots", {}).get(d.name)
        if name:
            keep.add(name)
    for remote in ctx.remotes:
        last = last_success(ctx, d.key, remote)
        if last:
            keep.add(last["snapshot"])
    return keep


def prune(ctx: Context, d: Dataset, *, dry_run: bool = False) -> list[str]:
    """Destroy the snapshots past the retention policy; one being read right now waits for the next prune."""
    names = zfs.snapshots(d.name)
    doomed = retention.to_prune(names, ctx.policy, ctx.clock(), protected(ctx, d))
    if dry_run:
        return doomed
    return [name for name in doomed if zfs.destroy_snapshot(d.name, name)]


def take_snapshots(ctx: Context) -> list[str]:
    """An hourly snapshot of each backed-up dataset (no upload), then pruning."""
    made = []
    name = retention.snapshot_name(ctx.clock())
    for d in ctx.datasets:
        if name not in zfs.snapshots(d.name):
            zfs.snapshot(d.name, name)
            made.append(f"{d.name}@{name}")
        prune(ctx, d)
    return made


# --- status --------------------------------------------------------------------------------------


def status(ctx: Context) -> dict[str, Any]:
    now = ctx.clock()
    runs = ctx.state.runs()
    last = runs[-1] if runs else None
    success = next((r for r in reversed(runs) if r["result"] == "success"), None)
    drills = [e for e in ctx.state.events("drills") if e["result"] == "success"]
    verifies = ctx.state.events("verify")
    info: dict[str, Any] = {
        "last_run": last,
        "last_success": success["id"] if success else None,
        "running": ctx.state.running(),
        "last_drill": drills[-1] if drills else None,
        "last_verify": verifies[-1] if verifies else None,
    }
    if success:
        info["last_success_age_hours"] = round((now - _parse_iso(success["end"])).total_seconds() / 3600, 1)
    if drills:
        info["last_drill_age_days"] = round((now - _parse_iso(drills[-1]["time"])).total_seconds() / 86400, 1)
    return info
