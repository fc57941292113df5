"""`backup status`: the last run (a run recorded as running whose process is gone shows as interrupted), the
last success and its age, the last verify and drill (failed ones too), and what is wrong, if anything."""

from __future__ import annotations

from datetime import datetime, timedelta

from homelab.backup.context import Context
from homelab.backup.records import Drill, RecoveryDrill, Run, RunState, Status, Verify


def _state(ctx: Context, last: Run | None) -> RunState | None:
    if last is None:
        return None
    if last.result != "running":
        return last.result
    marker = ctx.state.running()
    return "running" if marker is not None and marker.run == last.id else "interrupted"


def _recovery_problems(ctx: Context, now: datetime, drills: list[RecoveryDrill]) -> list[str]:
    """The last recovery drill failed, or the last good one is older than backup.recovery_drill_days (a
    machine that never drilled a recovery is not flagged: `backup drill --recover` starts the clock)."""
    if not drills:
        return []
    if drills[-1].result == "failed":
        return [f"the last recovery drill ({drills[-1].id}) failed: " + "; ".join(drills[-1].problems[:3])]
    limit = ctx.backup.recovery_drill_days
    if now - drills[-1].time > timedelta(days=limit):
        return [f"the last recovery drill ({drills[-1].id}) is older than {limit} days"]
    return []


def _problems(last: Run | None, state: RunState | None, verifies: list[Verify], drills: list[Drill]) -> list[str]:
    problems = []
    if last is None:
        problems.append("no backup has run yet")
    elif state in ("failed", "interrupted"):
        problems.append(f"the last run {last.id} {state}" + (f": {last.error}" if last.error else ""))
    for what, newest in (("verify", verifies[-1] if verifies else None), ("drill", drills[-1] if drills else None)):
        if newest is not None and newest.result == "failed":
            problems.append(f"the last {what} ({newest.id}) failed: " + "; ".join(newest.problems[:3]))
    return problems


def _age(now: datetime, then: datetime | None, unit: timedelta) -> float | None:
    return round((now - then) / unit, 1) if then is not None else None


def status(ctx: Context) -> Status:
    now = ctx.clock()
    runs = ctx.state.runs()
    last = runs[-1] if runs else None
    success = next((r for r in reversed(runs) if r.result == "success"), None)
    drills, verifies = ctx.state.drills(), ctx.state.verifies()
    good_drill = next((e for e in reversed(drills) if e.result == "success"), None)
    state = _state(ctx, last)
    recoveries = ctx.state.recovery_drills()
    good_recovery = next((r for r in reversed(recoveries) if r.result == "success"), None)
    return Status(
        last_run=last,
        last_run_state=state,
        last_success=success.id if success else None,
        last_success_age_hours=_age(now, success.end if success else None, timedelta(hours=1)),
        running=ctx.state.running(),
        last_verify=verifies[-1] if verifies else None,
        last_drill=drills[-1] if drills else None,
        last_good_drill=good_drill,
        last_good_drill_age_days=_age(now, good_drill.time if good_drill else None, timedelta(days=1)),
        last_recovery_drill=recoveries[-1] if recoveries else None,
        last_good_recovery_drill_age_days=_age(now, good_recovery.time if good_recovery else None, timedelta(days=1)),
        problems=_problems(last, state, verifies, drills) + _recovery_problems(ctx, now, recoveries),
    )
