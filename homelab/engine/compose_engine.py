"""The Compose engine: each stack a compose project on this machine's Docker Engine (engine: compose).

The verbs of homelab/engine/interface.py on top of compose.py (convergence, apply), health.py (the gate),
drift.py and service_status.py; `begin` takes down homelab's swarm stacks when the engine was swarm before.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from homelab.certs import attempts
from homelab.certs.store import read_here
from homelab.engine import compose
from homelab.engine.drift import Drift, find_drift, status_drift
from homelab.engine.health import compose_down
from homelab.engine.host import AcmeState, acme_state
from homelab.engine.service_status import ServiceStatus, status_rows
from homelab.engine.swarm import SWARM_MARK, leave_swarm
from homelab.layout import COMPOSE_FILE, project_name

if TYPE_CHECKING:
    from homelab.checks import Check
    from homelab.engine.model import ApplyResult, Convergence, Down, Guard, Progress
    from homelab.plan_model import Plan
    from homelab.runtime.docker import Docker
    from homelab.runtime.swarm import Swarm


class ComposeEngine:
    def __init__(self, docker: Docker | None = None, swarm: Swarm | None = None) -> None:
        from homelab.runtime.docker import Docker

        self.docker = docker or Docker()
        self._swarm = swarm

    def check(self) -> None:
        self.docker.check()

    def begin(self, out: Path, *, dry_run: bool, progress: Progress) -> None:
        if not dry_run and (out / SWARM_MARK).exists():
            from homelab.runtime.swarm import SwarmCli

            leave_swarm(self._swarm or SwarmCli(), out, None, progress)

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
        # a dry run hashes the compose files this render would write, resolved against the real folder
        pending = {s: files[f"{s}/{COMPOSE_FILE}"] for s in stacks if f"{s}/{COMPOSE_FILE}" in changed}
        return compose.converge(
            plan,
            out,
            self.docker,
            stacks,
            changed_files=changed,
            pending_compose=pending if dry_run else None,
            include_removed_stacks=include_removed_stacks,
        )

    def drift(self, convergence: Convergence, plan: Plan, changed: list[str]) -> list[Drift]:
        return find_drift(convergence, plan, changed)

    def apply(
        self, convergence: Convergence, plan: Plan, *, timeout: float, progress: Progress, guard: Guard
    ) -> ApplyResult:
        return compose.apply(convergence, plan, self.docker, timeout=timeout, progress=progress, guard=guard)

    def declared_down(self, plan: Plan, stacks: list[str]) -> list[Down]:
        return compose_down(plan, self.docker, stacks)

    def status(self, plan: Plan) -> list[ServiceStatus]:
        return status_rows(plan, self.docker)

    def status_drift(self, plan: Plan, out: Path) -> list[Drift]:
        return status_drift(plan, out, self.docker)

    def logs_argv(self, stack: str, service: str, out: Path, *, follow: bool, tail: str) -> list[str]:
        return self.docker.logs_argv(project_name(stack), out / stack, service, follow=follow, tail=tail)

    def down(self, plan: Plan, out: Path, stacks: list[str], progress: Progress) -> list[str]:
        return compose.down(plan, out, self.docker, stacks, progress=progress)

    def read_file(self, plan: Plan, path: Path) -> str | None:
        return read_here(path)  # the services run on this host

    def edge_log(self, plan: Plan) -> str:
        return attempts.edge_log(plan, self.docker)

    def file_state(self, plan: Plan, path: Path) -> AcmeState:
        return acme_state(path)

    def checks(self, plan: Plan) -> Iterator[Check]:
        return iter(())  # the engine's own checks (reachable, compose v2) are doctor's, for every engine

    def compose_driver(self) -> Docker:
        return self.docker
