"""The `Engine` interface: what every verb (`up`, `down`, `status`, `logs`, `doctor`) asks of the engine that
runs the stacks, whichever it is. Two implementations: Compose (compose_engine.py) and Swarm
(swarm_engine.py); `engine_for` is the one place that reads `engine:` from the config.

Adding an engine: implement this Protocol in a module of this package (converge, apply, the declared
state's health, status rows, drift, logs, down, doctor checks), add it to `engine_for`, and run the
parametrized tests of tests/unit/test_engines.py against its recording fake.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from homelab.checks import Check
    from homelab.config.models import Config
    from homelab.engine.drift import Drift
    from homelab.engine.host import AcmeState
    from homelab.engine.model import ApplyResult, Convergence, Down, Guard, Progress
    from homelab.engine.service_status import ServiceStatus
    from homelab.plan_model import Plan
    from homelab.render import StackFiles
    from homelab.runtime.docker import Docker


class Engine(Protocol):
    def check(self) -> None:
        """The engine answers and can run the stacks here; EnvironmentProblem in one line if not."""
        ...

    def begin(self, out: Path, *, dry_run: bool, progress: Progress) -> None:
        """Before `up` renders: take down what the other engine still runs of homelab (the same datasets
        must not have two writers)."""
        ...

    def converge(
        self,
        plan: Plan,
        out: Path,
        files: Mapping[str, bytes],
        stacks: list[str],
        *,
        changed: list[str],
        dry_run: bool,
        include_removed_stacks: bool,
    ) -> Convergence:
        """create / recreate / start / leave / remove for every service of `stacks`, decided before
        anything changes; `files` is this render, `changed` the paths it changed."""
        ...

    def drift(self, convergence: Convergence, plan: Plan, changed: list[str]) -> list[Drift]:
        """Services changed by hand that `up` will put back (none where the engine itself does)."""
        ...

    def apply(
        self, convergence: Convergence, plan: Plan, *, timeout: float, progress: Progress, guard: Guard
    ) -> ApplyResult:
        """Bring the changed stacks to the plan in order; ApplyFailed at the first that does not converge."""
        ...

    def declared_down(self, plan: Plan, stacks: list[str]) -> list[Down]:
        """Every declared service of `stacks` that is not running and healthy, with the engine's reason."""
        ...

    def status(self, plan: Plan) -> list[ServiceStatus]:
        """One row per declared service; certificates read where the edge runs (`read_file`)."""
        ...

    def status_drift(self, plan: Plan, out: Path) -> list[Drift]: ...

    def logs_argv(self, stack: str, service: str, out: Path, *, follow: bool, tail: str) -> list[str]: ...

    def down(self, plan: Plan, out: Path, stacks: list[str], progress: Progress) -> list[str]:
        """Take the stacks down, last first; returns those that ran. Data, acme.json and secrets stay."""
        ...

    def read_file(self, plan: Plan, path: Path) -> str | None:
        """The text of a file a service mounts, read on the node where that service runs (None when it
        is not there); acme.json's private keys stay where they are. OSError when it cannot be read."""
        ...

    def edge_log(self, plan: Plan) -> str:
        """The tail of the edge's ACME client's log while it runs, wherever it runs ("" when it does not):
        `certs`' last error, and the challenge records `up` must not remove."""
        ...

    def file_state(self, plan: Plan, path: Path) -> AcmeState:
        """acme.json's state (missing, not a file, its mode) on the node where the service mounting it
        runs, for `doctor`. OSError when it cannot be read."""
        ...

    def checks(self, plan: Plan) -> Iterator[Check]:
        """The `doctor` checks of this engine."""
        ...

    def compose_driver(self) -> Docker | None:
        """The Compose driver the image-upgrade journal, the staging switch and local mode work through;
        None on an engine that rolls back by itself (Swarm)."""
        ...


def stack_files_for(config: Config) -> StackFiles:
    """The renderer of each stack's file for the engine the config names (render_all's `stack_files`)."""
    if config.engine == "swarm":
        from homelab.render.swarm_stack import render

        return render
    from homelab.render import compose_files

    return compose_files


def engine_for(config: Config) -> Engine:
    """The engine the config names (its drivers are created here, checked by `check`)."""
    if config.engine == "swarm":
        from homelab.engine.swarm_engine import SwarmEngine

        return SwarmEngine()
    from homelab.engine.compose_engine import ComposeEngine

    return ComposeEngine()
