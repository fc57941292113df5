"""The health gate does not trust compose's exit code: a planned service with no container fails `up`.

The engine is replaced by a recording of what it listed (tests/docker has the real engine; this case -
compose returning 0 having created nothing - was seen there but cannot be produced on demand).
"""

from __future__ import annotations

import time
from pathlib import Path

from homelab.engine.health import diagnose, wait_healthy
from homelab.engine.model import ServiceAction, StackPlan
from homelab.runtime.docker import Container


def _running(service: str) -> Container:
    return Container(
        id=f"id-{service}",
        name=f"homelab-dev-{service}-1",
        project="homelab-dev",
        service=service,
        state="running",
        health="healthy",
        health_output="",
        exit_code=0,
        config_hash="h",
        image="busybox",
        image_id="sha256:1",
        created="",
        started_at="",
        env=(),
        mounts=(),
        ports=(),
    )


class ListedContainers:
    def __init__(self, *containers: Container):
        self.listed = list(containers)

    def containers(self, projects: list[str]) -> list[Container]:
        return self.listed


def test_a_service_compose_did_not_create_fails_the_gate(tmp_path: Path) -> None:
    stack = StackPlan(
        "dev",
        tmp_path,
        [ServiceAction("dev", "gitea", "create"), ServiceAction("dev", "jenkins", "create")],
    )
    engine = ListedContainers(_running("gitea"))
    began = time.monotonic()
    assert wait_healthy(engine, stack, began + 60) == ["jenkins"]  # type: ignore[arg-type]
    assert time.monotonic() - began < 5  # reported at once, not after the timeout
    failure = diagnose(engine, stack, TimeoutError("not healthy: jenkins"), 1.0, ["monitoring"])  # type: ignore[arg-type]
    assert str(failure).splitlines() == [
        "stack dev: service jenkins has no container (compose created none)",
        "  stacks not applied: monitoring",
    ]


def test_every_planned_service_running_passes(tmp_path: Path) -> None:
    stack = StackPlan("dev", tmp_path, [ServiceAction("dev", "gitea", "leave"), ServiceAction("dev", "old", "remove")])
    assert wait_healthy(ListedContainers(_running("gitea")), stack, time.monotonic() + 60) == []  # type: ignore[arg-type]
