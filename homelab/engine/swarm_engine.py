"""The Swarm engine: each stack a Swarm stack deployed from this manager (engine: swarm).

The verbs of homelab/engine/interface.py on top of swarm.py (service digests, deploy, the convergence
gate) and swarm_state.py (status rows, the declared state's health, doctor checks). Swarm puts back what
differs from a service's spec by itself: no drift; it rolls a failed update back by itself: no journal.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from homelab.certs import attempts
from homelab.engine import swarm_state
from homelab.engine.swarm import Desired, converge, desired, leave_swarm
from homelab.engine.swarm import apply as deploy
from homelab.engine.swarm_files import read_on_node, state_on_node
from homelab.errors import EnvironmentProblem
from homelab.layout import EDGE_STACK, project_name

if TYPE_CHECKING:
    from homelab.checks import Check
    from homelab.engine.drift import Drift
    from homelab.engine.host import AcmeState
    from homelab.engine.model import ApplyResult, Convergence, Down, Guard, Progress
    from homelab.engine.service_status import ServiceStatus
    from homelab.plan_model import Plan
    from homelab.runtime.docker import Docker
    from homelab.runtime.docker import Engine as DockerEngine
    from homelab.runtime.swarm import Swarm


class SwarmEngine:
    def __init__(self, swarm: Swarm | None = None, docker: DockerEngine | None = None) -> None:
        from homelab.runtime.docker import Docker
        from homelab.runtime.swarm import SwarmCli

        self.swarm = swarm or SwarmCli()
        self.docker = docker or Docker()  # this node's engine: compose projects a switch takes down
        self._wanted: dict[str, Desired] = {}

    def check(self) -> None:
        """The engine answers and is a manager of an active swarm."""
        self.docker.check()
        found = self.swarm.state()
        if found.local != "active":
            raise EnvironmentProblem(
                f"engine: swarm, but this engine is not in a swarm ({found.local}): run `docker swarm init` "
                "(docs/swarm.md)"
            )
        if not found.manager:
            raise EnvironmentProblem("engine: swarm, but this node is a worker: run homelab on a manager node")

    def begin(self, out: Path, *, dry_run: bool, progress: Progress) -> None:
        """Nothing before the render: compose projects of homelab are taken down by `apply`."""

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
        self._wanted = desired(plan, out, dict(files), stacks)
        return converge(plan, self._wanted, self.swarm, include_removed_stacks=include_removed_stacks)

    def drift(self, convergence: Convergence, plan: Plan, changed: list[str]) -> list[Drift]:
        return []

    def apply(
        self, convergence: Convergence, plan: Plan, *, timeout: float, progress: Progress, guard: Guard
    ) -> ApplyResult:
        swarm_state.label_single_node(self.swarm, progress)
        return deploy(convergence, self._wanted, plan, self.swarm, self.docker, timeout=timeout, progress=progress)

    def declared_down(self, plan: Plan, stacks: list[str]) -> list[Down]:
        return swarm_state.swarm_down(plan, self.swarm, stacks)

    def status(self, plan: Plan) -> list[ServiceStatus]:
        return swarm_state.status(plan, self.swarm, partial(read_on_node, plan, self.swarm))

    def status_drift(self, plan: Plan, out: Path) -> list[Drift]:
        return []

    def logs_argv(self, stack: str, service: str, out: Path, *, follow: bool, tail: str) -> list[str]:
        name = f"{project_name(stack)}_{service}"
        if name not in {s.name for s in self.swarm.services([project_name(stack)])}:
            raise EnvironmentProblem(f"{stack}/{service} is not deployed on the swarm: run `homelab up` first")
        return self.swarm.logs_argv(name, follow=follow, tail=tail)

    def down(self, plan: Plan, out: Path, stacks: list[str], progress: Progress) -> list[str]:
        return leave_swarm(self.swarm, out, stacks, progress)

    def read_file(self, plan: Plan, path: Path) -> str | None:
        return read_on_node(plan, self.swarm, path)

    def edge_log(self, plan: Plan) -> str:
        """The edge client's log through the manager (`service logs`), while one of its tasks runs."""
        namespace, client = project_name(EDGE_STACK), attempts.acme_client(plan)
        found = [s for s in self.swarm.services([namespace]) if s.service == client]
        tasks = self.swarm.tasks([s.id for s in found])
        if not any(t.desired == "running" and t.state == "running" for t in tasks):
            return ""
        return self.swarm.logs_tail(f"{namespace}_{client}", attempts.LOG_LINES)

    def file_state(self, plan: Plan, path: Path) -> AcmeState:
        return state_on_node(plan, self.swarm, path)

    def checks(self, plan: Plan) -> Iterator[Check]:
        return swarm_state.checks(plan, self.swarm)

    def compose_driver(self) -> Docker | None:
        return None
