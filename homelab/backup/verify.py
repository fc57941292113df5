"""`backup verify`: cryptcheck every object of the last successful backup against its snapshot."""

from __future__ import annotations

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
            with ctx.snapshots.open(d.name, last.entry.snapshot, ctx.state.mounts) as source:
                result = ctx.rclone.cryptcheck(
                    source,
                    ctx.remote_path(remote, "current", d.key),
                    label=f"verify-{remote}-{d.key.replace('/', '_')}",
                )
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
