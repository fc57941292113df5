"""Where a `backup run` spends its time, phase by phase, for bench/backup.py.

`profiled(ctx)` wraps the steps homelab.backup.run calls (on the context's drivers and on the modules it
calls through) with timers, for the length of one run; `Phases` adds up the seconds of each. The phases that
run off the run's own thread (the manifest written and the cryptcheck batches of homelab.backup.check while
the sync uploads, the listing uploaded while the read clone is destroyed) are timed too, but listed apart as
`beside: ...`: they cost no wall time of their own. `rest` is the run's wall time that no phase accounts
for (the lock, reading records).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

from homelab.backup import check, context, listing, names, run, tree

# on the run's own thread, in the order a run goes through them
ORDER = (
    "snapshot",
    "mount",
    "scan",
    "names",
    "manifest",
    "sync",
    "check",
    "listing",
    "records",
    "prune",
    "unmount",
    "rest",
)
BESIDE = "beside: "  # prefix of a phase timed off the run's own thread


class Phases:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self._lock = threading.Lock()

    def add(self, phase: str, seconds: float) -> None:
        """Seconds spent off the run's own thread (beside the sync, or the clone's destruction) are counted
        apart: they are not part of the run's wall time."""
        if threading.current_thread() is not threading.main_thread():
            phase = BESIDE + phase
        with self._lock:
            self.seconds[phase] += seconds

    def timed(self, phase: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            start = time.monotonic()
            try:
                return fn(*args, **kwargs)
            finally:
                self.add(phase, time.monotonic() - start)

        return wrapper

    def timed_context(self, enter: str, leave: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @contextlib.contextmanager
        def wrapper(*args: Any, **kwargs: Any) -> Iterator[Any]:
            start = time.monotonic()
            manager = fn(*args, **kwargs)
            value = manager.__enter__()
            self.add(enter, time.monotonic() - start)
            try:
                yield value
            except BaseException as exc:
                start = time.monotonic()
                if not manager.__exit__(type(exc), exc, exc.__traceback__):
                    raise
            else:
                start = time.monotonic()
                manager.__exit__(None, None, None)
            finally:
                self.add(leave, time.monotonic() - start)

        return wrapper


@contextlib.contextmanager
def _patched(patches: list[tuple[object, str, Any]]) -> Iterator[None]:
    """setattr each (owner, name, value) for the block; each owner (module, class, instance) as it was after."""
    saved = [(owner, name, vars(owner).get(name, _ABSENT)) for owner, name, _ in patches]
    try:
        for owner, name, value in patches:
            setattr(owner, name, value)
        yield
    finally:
        for owner, name, value in reversed(saved):
            if value is _ABSENT:
                delattr(owner, name)  # an instance's own attribute: its class's method shows again
            else:
                setattr(owner, name, value)


_ABSENT = object()


@contextlib.contextmanager
def profiled(ctx: context.Context, phases: Phases) -> Iterator[None]:
    """Every run made with ctx inside the block adds its phase times to `phases`."""
    t = phases.timed
    snapshots, state, rclone = ctx.snapshots, ctx.state, ctx.rclone
    finish = check.CheckAsWritten.finish
    part_check = check.Part.check
    patches: list[tuple[object, str, Any]] = [
        (snapshots, "snapshot", t("snapshot", snapshots.snapshot)),
        (snapshots, "clean_stale_clones", t("snapshot", snapshots.clean_stale_clones)),
        (snapshots, "open", phases.timed_context("mount", "unmount", snapshots.open)),
        (tree, "scan", t("scan", tree.scan)),
        (names, "assign", t("names", names.assign)),
        (names, "stage", phases.timed_context("names", "names", names.stage)),
        (state, "save_manifest", t("manifest", state.save_manifest)),
        (rclone, "sync", t("sync", rclone.sync)),
        (check.CheckAsWritten, "finish", t("check", finish)),
        (check.Part, "check", t("check", part_check)),
        (listing, "upload", t("listing", listing.upload)),
        (state, "save_run", t("records", state.save_run)),
        (state, "mark_running", t("records", state.mark_running)),
        (run, "prune", t("prune", run.prune)),
    ]
    with _patched(patches):
        yield


def profile_run(ctx: context.Context, fn: Callable[[], Any]) -> tuple[float, Any, dict[str, float]]:
    """(wall seconds, what fn returned, seconds by phase with `rest`) of one call of fn, a run on ctx."""
    phases = Phases()
    with profiled(ctx, phases):
        start = time.monotonic()
        result = fn()
        wall = time.monotonic() - start
    split = dict(phases.seconds)
    split["rest"] = wall - sum(v for k, v in split.items() if not k.startswith(BESIDE))
    return wall, result, split
