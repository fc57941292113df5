"""`backup drill`: restore a random sample (everything when a full drill is due) into scratch and compare
content, owner, mode and mtime with the snapshot; the result is recorded for `status`."""

from __future__ import annotations

import hashlib
import random
import tempfile
from datetime import datetime, timedelta
from pathlib import Path

from homelab.backup import listing, longpath, tree
from homelab.backup.context import BackupError, Context, Say, quiet
from homelab.backup.records import Drill, LastGood
from homelab.backup.retention import STAMP
from homelab.plan_model import Dataset

FULL_DRILL_EVERY = timedelta(days=30)


def digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def full_due(ctx: Context, now: datetime) -> bool:
    fulls = [e for e in ctx.state.drills() if e.full and e.result == "success"]
    return not fulls or now - fulls[-1].time >= FULL_DRILL_EVERY


def drill(
    ctx: Context, *, sample: int = 20, full: bool | None = None, seed: int | None = None, say: Say = quiet
) -> Drill:
    now = ctx.clock()
    full = full_due(ctx, now) if full is None else full
    rng = random.Random(seed)  # noqa: S311 - picks a sample to restore, not a secret
    checked, problems = 0, []
    for d in ctx.datasets:
        for remote in ctx.remotes:
            last = ctx.last_success(d.key, remote)
            if last is None:
                problems.append(f"{d.key} -> {remote}: no successful backup to drill")
                continue
            entries = ctx.state.manifest(last.entry.manifest)
            objects = [e for e in entries if e.kind != "d"]
            chosen = entries if full else _with_link_targets(rng.sample(objects, min(sample, len(objects))), objects)
            found = _drill_one(ctx, d, remote, last, chosen)
            problems += found
            checked += len(chosen)
            say(
                f"{d.key} -> {remote}: {len(chosen)} entries restored, content, owners, modes and mtimes compared "
                f"({'full' if full else 'sample'})"
            )
    record = Drill(
        id=now.strftime(STAMP),
        time=now,
        full=full,
        files=checked,
        result="failed" if problems else "success",
        problems=problems,
    )
    ctx.state.save_drill(record)
    if problems:
        raise BackupError("drill failed:\n  " + "\n  ".join(problems[:20]))
    return record


def _with_link_targets(sample: list[tree.Entry], objects: list[tree.Entry]) -> list[tree.Entry]:
    """The sample plus the first name of every hardlink it holds: a second name restored alone would have
    nothing to be linked to, and the drill would call an intact backup broken."""
    by_path = {e.path: e for e in objects}
    targets = {e.link for e in sample if e.link} - {e.path for e in sample}
    return sample + [by_path[path] for path in sorted(targets) if path in by_path]


def _drill_one(ctx: Context, d: Dataset, remote: str, last: LastGood, chosen: list[tree.Entry]) -> list[str]:
    with (
        tempfile.TemporaryDirectory(prefix="drill-", dir=ctx.state.scratch) as scratch,
        ctx.snapshots.open(d.name, last.entry.snapshot, ctx.state.mounts) as source,
    ):
        target = Path(scratch) / "restored"
        # from where a restore takes them: a run that failed since moved what it replaced to its archive
        try:
            listing.download(ctx, d, remote, last.run, chosen, target, f"drill-{remote}")
        except BackupError as exc:
            return [f"{d.key} -> {remote}: {exc}"]
        tree.apply(target, chosen)
        problems = [f"{d.key}: {p}" for p in tree.differences(chosen, target)]
        for e in (e for e in chosen if e.kind == "f"):
            # a path deeper than PATH_MAX is read through a short one (homelab.backup.longpath)
            with longpath.short(target / e.path) as got, longpath.short(source / e.path) as want:
                if got.is_file() and not got.is_symlink() and digest(got) != digest(want):
                    shown = longpath.shown(e.path)
                    problems.append(f"{d.key}: {shown}: restored content differs from snapshot {last.entry.snapshot}")
        return problems
