"""One `homelab up`, as a library session: load, build the Plan once, render, converge, apply, wait for the
declared state, report. The engine (homelab/engine/interface.py) does the engine's part; the CLI parses
the flags and prints what this module hands it (`Shown`).

Order, and why:
1. the engine answers (`check`), and what the other engine runs of homelab is taken down (`begin`);
2. the rate-limit guard refuses before anything is written (homelab/certs/guard.py), and the challenge
   records a failed order left in the DNS server are removed (homelab/certs/challenges.py);
3. an upgrade a killed `homelab` left in the journal is finished or undone, and the compose files a
   rollback returns to are read, before the render overwrites them (homelab/upgrade/settle.py; Compose
   only); a stack rolled back there, or whose rollback cannot be finished, is left as it is by this `up`,
   which brings up the others and then fails saying why;
4. render, converge, drift to repair; shown before anything changes;
5. apply what changed (the upgrade guard around each stack), then the declared state's health, whatever
   this run deployed: `ApplyFailed` naming each declared service that is down, with the engine's reason;
6. on an `up` of every stack, the staging-first switch; in local mode, the local CA's root and URLs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from homelab.engine import health
from homelab.engine.drift import Drift, describe, mark_repairs
from homelab.engine.model import ApplyResult, Convergence, select_stacks

if TYPE_CHECKING:
    from homelab.config.loaded import LoadedConfig
    from homelab.engine.interface import Engine
    from homelab.engine.model import Guard, Progress
    from homelab.plan_model import Plan
    from homelab.project import RenderResult
    from homelab.upgrade.settle import Recovery


@dataclass(frozen=True)
class UpOptions:
    stacks: list[str] = field(default_factory=list)  # none: every stack
    dry_run: bool = False
    timeout: float = 300
    force: bool = False  # replace stack files edited by hand
    snapshot: bool = True  # refuse an upgrade no snapshot can undo
    local: bool = False


@dataclass(frozen=True)
class Loaded:
    """The config as `up`/`down` act on it (as written, or localized) and its Plan, built once."""

    config: LoadedConfig
    plan: Plan
    out: Path


@dataclass
class UpReport:
    render: RenderResult
    convergence: Convergence
    applied: ApplyResult | None = None  # None: a dry run, or nothing to change
    repairs: list[Drift] = field(default_factory=list)
    seconds: float = 0.0
    held: list[str] = field(default_factory=list)  # stacks left as they are: their journal (the error says why)

    def summary(self) -> str:
        done = "nothing to apply"
        if self.applied is not None:
            done = ", ".join(self.applied.applied + [f"{s} (removed)" for s in self.applied.removed]) + " applied"
        left = f"; not brought up: {', '.join(self.held)} (below)" if self.held else ""
        return f"up: {done}; all healthy in {self.seconds:.1f}s{left}"


@dataclass(frozen=True)
class Shown:
    """What the CLI prints, as it happens (`up` is long: the plan is shown before it is applied)."""

    plan: Callable[[RenderResult, Convergence], None]  # the render's report and the convergence plan
    progress: Progress  # each step (nothing with -q)
    say: Callable[[str], None]  # lines printed whatever -q says


def load(config: Path, out: Path | None, local: bool) -> Loaded:
    from homelab import local as local_mode
    from homelab.config.loader import load as load_config
    from homelab.plan import build_plan
    from homelab.project import default_out

    loaded = load_config(config)
    if not local:
        return Loaded(loaded, build_plan(loaded), (out or default_out(loaded)).resolve())
    localized = local_mode.localize(loaded)
    return Loaded(localized, local_mode.local_plan(localized), (out or local_mode.local_out(loaded)).resolve())


def up(loaded: Loaded, engine: Engine, options: UpOptions, shown: Shown) -> UpReport:
    from homelab.certs import guard
    from homelab.project import render_project

    began = time.monotonic()
    engine.check()
    engine.begin(loaded.out, dry_run=options.dry_run, progress=shown.progress)
    # refuses before anything is written; the certificates held are read where the edge runs
    counted = guard.enforce(loaded.plan, dry_run=options.dry_run, read=partial(engine.read_file, loaded.plan))
    if counted.unread:
        shown.say(f"certificate guard skipped: the edge's store {counted.unread}")
    for line in _stale_challenges(loaded.plan, engine, options.dry_run):
        shown.say(line)
    recovery, previous = _journal_first(loaded, engine, options, shown.progress)
    result = render_project(loaded.config, loaded.out, force=options.force, dry_run=options.dry_run, plan=loaded.plan)
    selected = [s for s in select_stacks(result.plan, options.stacks) if s not in recovery.held]
    driver = engine.compose_driver()
    if options.local and not options.dry_run and driver is not None:
        from homelab import local as local_mode

        local_mode.pull_missing(result.plan, selected, driver, result.out)  # refuses naming each image
    changed = [c.path for c in result.report.changes if c.status in ("new", "changed")]
    convergence = engine.converge(
        result.plan, result.out, result.rendering.files, selected, changed=changed, dry_run=options.dry_run,
        include_removed_stacks=not options.stacks,
    )  # fmt: skip
    report = UpReport(
        result,
        convergence,
        repairs=mark_repairs(convergence, engine.drift(convergence, result.plan, changed)),
        held=list(recovery.held),
    )
    shown.plan(result, convergence)
    if options.dry_run:
        return report
    if convergence.changed:
        undo = _undo_guard(convergence, result, engine, previous, options, shown.progress)
        report.applied = engine.apply(
            convergence, result.plan, timeout=options.timeout, progress=shown.progress, guard=undo
        )
    # whatever this run deployed: every declared service of the selected stacks must be up at the end
    gate = [s for s in health.gated_stacks(result.plan, selected) if s not in recovery.held]
    health.require_declared(partial(engine.declared_down, result.plan, gate), options.timeout)
    report.seconds = time.monotonic() - began
    for found in report.repairs if report.applied else []:
        shown.say(f"repaired {describe(found)}")
    shown.say(report.summary())
    held = recovery.error()
    if held is not None:  # the others are up; the staging switch waits for an `up` of every stack
        raise held
    _finish(loaded, result, engine, options, shown)
    return report


def _journal_first(
    loaded: Loaded, engine: Engine, options: UpOptions, progress: Progress
) -> tuple[Recovery, dict[str, bytes]]:
    from homelab.upgrade.settle import Recovery

    driver = engine.compose_driver()
    if driver is None:
        return Recovery(loaded.out), {}
    from homelab.upgrade.run import backup_state, journal_first

    return journal_first(
        loaded.out, driver, timeout=options.timeout, progress=progress, dry_run=options.dry_run,
        only=options.stacks, marks=backup_state(loaded.plan),
    )  # fmt: skip


def _stale_challenges(plan: Plan, engine: Engine, dry_run: bool) -> list[str]:
    """The challenge records a failed order left in the DNS server, removed before anything is written
    (homelab/certs/challenges.py); the running edge's log, wherever it runs, says which it still answers on."""
    from homelab.certs import challenges

    return challenges.remove_stale(plan, engine.edge_log(plan), dry_run=dry_run)


def _undo_guard(
    convergence: Convergence,
    result: RenderResult,
    engine: Engine,
    previous: dict[str, bytes],
    options: UpOptions,
    progress: Progress,
) -> Guard:
    """The image-upgrade guard (snapshot before, roll back on failure) on Compose; Swarm rolls back itself."""
    driver = engine.compose_driver()
    if driver is None:
        return lambda _stack: nullcontext()
    from homelab.upgrade.run import guard_for

    return guard_for(
        convergence, result.plan, result.out, driver, previous, options.snapshot, options.timeout, progress
    )


def _finish(loaded: Loaded, result: RenderResult, engine: Engine, options: UpOptions, shown: Shown) -> None:
    """After `up` applied (or found nothing to do): staging first's switch - production is asked, in this
    `up`, for what staging issued; only on an `up` of every stack, as it changes every app's routers - then
    local mode's last step."""
    driver = engine.compose_driver()
    if not options.stacks and driver is not None:
        from homelab.certs import switch

        for line in switch.after_up(
            loaded.config, loaded.plan, result.out, driver, timeout=options.timeout, progress=shown.progress
        ):
            shown.say(line)
    if options.local:
        from homelab import local as local_mode

        local_mode.finish(loaded.config, result.plan, shown.say)
