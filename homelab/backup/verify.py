"""`backup verify`: cryptcheck every object of the last successful backup against its snapshot (those
stored under derived names against their files, homelab.backup.names): each object that differs, is missing,
or is on the remote with no entry of the listing pointing at it (`.homelab-names` included) is named."""

from __future__ import annotations

from homelab.backup import names
from homelab.backup.check import Part, absorb_part
from homelab.backup.context import BackupError, Context, Say, quiet
from homelab.backup.records import Damage, Verify
from homelab.backup.retention import STAMP


def verify(ctx: Context, only: list[str] | None = None, say: Say = quiet) -> Verify:
    problems: list[str] = []
    damaged: list[Damage] = []
    checked = 0
    for d in ctx.select(only):
        for remote in ctx.remotes:
            last = ctx.last_success(d.key, remote)
            if last is None:
                problems.append(f"{d.key} -> {remote}: no successful backup yet")
                continue
            entries = ctx.state.manifest(last.entry.manifest)
            dst, label = ctx.remote_path(remote, "current", d.key), f"verify-{remote}-{d.key.replace('/', '_')}"
            with (
                ctx.snapshots.open(d.name, last.entry.snapshot, ctx.state.mounts) as source,
                names.stage(entries, source, ctx.state.scratch) as staged,
            ):
                result = Part(source, dst, "", tuple(names.skipped(entries))).check(ctx.rclone, label)
                if last.entry.derived_files or names.on_remote(ctx.rclone, dst):
                    derived = Part(staged, f"{dst}/{names.FOLDER}", "", follow_links=True)
                    absorb_part(result, derived.check(ctx.rclone, f"{label}-names"), names.FOLDER)
            checked += result.matched
            if result.differ or result.missing:
                damaged.append(Damage(key=d.key, remote=remote, paths=result.differ + result.missing))
            problems += [f"{d.key} -> {remote}: {p}" for p in result.problems]
            say(
                f"{'ok' if not result.problems else 'FAILED':6} {d.key} -> {remote}: {result.matched} files match "
                f"snapshot {last.entry.snapshot}"
            )
    when = ctx.clock()
    record = Verify(
        id=when.strftime(STAMP),
        time=when,
        checked=checked,
        result="failed" if problems else "success",
        problems=problems,
        damaged=damaged,
    )
    ctx.state.save_verify(record)
    if problems:
        raise BackupError("verify failed:\n  " + "\n  ".join(problems))
    return record
