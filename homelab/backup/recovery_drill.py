"""`backup drill --recover`: the whole recovery (homelab.backup.recover) from the newest bundle into scratch -
a config folder and plain folders under the state folder - then every restored dataset compared, entry by
entry (owner, mode, mtime, links) and file by file (sha256), with the snapshot its backup was taken from,
and every sentinel read back. The scratch is removed afterwards; the result is recorded for `status` and
for the monitoring's exec program (State.save_recovery_drill).

No stack is started: the stacks' Compose project names and published ports are fixed by homelab.yaml, so
a drill's stacks would replace the live ones (docs/recovery.md).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from homelab.backup import crypt, tree
from homelab.backup.context import BackupError, Context, Say, quiet
from homelab.backup.drill import digest
from homelab.backup.records import RecoveryDrill
from homelab.backup.recover import Recovered, recover
from homelab.backup.recovery import Target
from homelab.backup.retention import STAMP
from homelab.config.loader import load
from homelab.plan import build_plan
from homelab.runtime.rclone import RcloneDriver


def recovery_drill(ctx: Context, *, say: Say = quiet, driver: RcloneDriver | None = None) -> RecoveryDrill:
    """`driver`: the rclone the recovery uses (default: the real one, with its own config)."""
    now = ctx.clock()
    record = RecoveryDrill(id=now.strftime(STAMP), time=now, bundle=None, result="failed")
    scratch = ctx.state.scratch / f"recovery-drill-{record.id}"
    remote = ctx.remotes[0]
    backup = ctx.backup.remotes[remote]
    target = Target(
        remote=f"{crypt.base_name(remote)}:{backup.path}",
        password=ctx.crypt_secrets[0],
        salt=ctx.crypt_secrets[1],
        config_dir=scratch / "config",
        mountpoint=str(scratch / "data"),
        folders=True,
        stall_timeout=ctx.backup.stall_timeout,
        rclone_sections=ctx.state.rclone_config.read_text(encoding="utf-8"),
    )
    try:
        result = recover(target, say=say, clock=ctx.clock, driver=driver)
        record.bundle, record.sentinels = result.run, len(result.sentinels)
        record.rto_seconds, record.rpo_seconds = round(result.rto, 1), round(result.rpo, 1)
        record.problems = _compare(ctx, result, target)
        record.datasets = sum(1 for s in result.steps if s[0].startswith("restore "))
    except BackupError as exc:
        record.problems = [str(exc).splitlines()[0]]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    record.result = "failed" if record.problems else "success"
    ctx.state.save_recovery_drill(record)
    if record.problems:
        raise BackupError("recovery drill failed:\n  " + "\n  ".join(record.problems[:20]))
    return record


def _compare(ctx: Context, result: Recovered, target: Target) -> list[str]:
    """Each restored dataset against the snapshot of the run its bundle belongs to."""
    run = next((r for r in ctx.state.runs() if r.id == result.run), None)
    if run is None:
        return [f"run {result.run} is not in the state folder: nothing to compare with"]
    recovered = {d.key: Path(d.path) for d in build_plan(load(target.config_dir / ctx.loaded.path.name)).datasets}
    problems = []
    for d in ctx.datasets:
        with ctx.snapshots.open(d.name, run.snapshot, ctx.state.mounts) as source:
            want, got = tree.scan(source), tree.scan(recovered[d.key])
            if want != got:
                only_one = {e.path for e in want} ^ {e.path for e in got}
                differ = sorted(only_one or {a.path for a, b in zip(want, got, strict=True) if a != b})
                problems.append(f"{d.key}: entries differ from {run.snapshot}: {', '.join(differ[:5])}")
                continue
            for e in (e for e in want if e.kind == "f"):
                if digest(source / e.path) != digest(recovered[d.key] / e.path):
                    problems.append(f"{d.key}: {e.path}: content differs from {run.snapshot}")
    return problems
