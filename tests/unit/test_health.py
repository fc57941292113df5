"""The health gate against a scripted engine: waiting while services start, and what a failure says."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from homelab.engine import health
from homelab.engine.model import ServiceAction, StackPlan
from homelab.errors import CommandFailed
from homelab.runtime.docker import Container
from tests.fakes.docker import FakeDocker, container

DEV = "homelab-dev"


class Scripted(FakeDocker):
    """Answers `containers` from a script, one listing per call (the last one repeats)."""

    def __init__(self, *listings: list[Container]) -> None:
        super().__init__()
        self.listings = list(listings)

    def containers(self, projects=None) -> list[Container]:  # type: ignore[no-untyped-def]
        self.calls.append(("containers",))
        return self.listings.pop(0) if len(self.listings) > 1 else self.listings[0]


def _stack(tmp_path: Path, *services: str) -> StackPlan:
    return StackPlan("dev", tmp_path, [ServiceAction("dev", s, "create") for s in services])


def test_waits_while_a_service_is_starting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(health, "POLL_SECONDS", 0.0)
    engine = Scripted(
        [container(DEV, "gitea", health="starting")],
        [container(DEV, "gitea", health="starting")],
        [container(DEV, "gitea")],
    )
    assert health.wait_healthy(engine, _stack(tmp_path, "gitea"), time.monotonic() + 600) == []
    assert len(engine.calls) == 3


def test_still_starting_at_the_deadline_is_reported(tmp_path: Path) -> None:
    engine = Scripted([container(DEV, "gitea", health="starting"), container(DEV, "jenkins", state="exited")])
    assert health.wait_healthy(engine, _stack(tmp_path, "gitea", "jenkins"), time.monotonic() - 1) == [
        "gitea",
        "jenkins",
    ]


def test_diagnose_names_each_bad_service_worst_first(tmp_path: Path) -> None:
    engine = Scripted(
        [
            container(DEV, "gitea", health="starting", health_output=""),
            container(DEV, "jenkins", id="j1", state="exited", health=None, exit_code=137),
            container(DEV, "rstudio", health="unhealthy", health_output="curl: (7) refused"),
            container(DEV, "proxy", state="created", health=None),
        ]
    )
    engine.logs["j1"] = "starting\n  line two \nline three\nKilled  "
    failure = health.diagnose(
        engine, _stack(tmp_path, "gitea", "jenkins", "rstudio", "proxy"), TimeoutError(), 42.4, []
    )
    assert str(failure).splitlines() == [
        "stack dev: service rstudio is unhealthy; last health check: curl: (7) refused",
        "stack dev: service gitea did not become healthy within 42s; last health check: (no output)",
        "stack dev: service jenkins exited (exit code 137); last output: line two | line three | Killed",
        "  not started (waiting on it): proxy",
    ]
    assert ("logs_tail", "j1", 3) in engine.calls


def test_a_stopped_service_without_output_says_only_its_exit_code(tmp_path: Path) -> None:
    engine = Scripted([container(DEV, "gitea", state="dead", health=None, exit_code=1)])
    failure = health.diagnose(engine, _stack(tmp_path, "gitea"), TimeoutError("x"), 1.0, ["monitoring"])
    assert str(failure).splitlines() == [
        "stack dev: service gitea dead (exit code 1)",
        "  stacks not applied: monitoring",
    ]


def test_a_compose_failure_with_healthy_containers_quotes_compose(tmp_path: Path) -> None:
    engine = Scripted([container(DEV, "gitea")])
    failed = CommandFailed(["docker", "compose", "up"], 18, "", "")
    failure = health.diagnose(engine, _stack(tmp_path, "gitea"), failed, 1.0, [])
    assert str(failure) == "stack dev: docker compose up failed: exit 18"
    timed_out = health.diagnose(engine, _stack(tmp_path, "gitea"), TimeoutError("compose hung"), 1.0, [])
    assert str(timed_out) == "stack dev: docker compose up failed: compose hung"
