"""`up` and `status` answer for the declared state, on both engines (issue 26): whatever a run deployed,
`up` exits 1 unless every declared service of the selected stacks (and the edge they are served through)
runs and is healthy, naming each one that is not with the engine's own reason; `status` says the same.
The same tests run against the recording fakes of Compose (tests/fakes/docker.py) and of Swarm
(tests/fakes/swarm.py); tests/docker/test_declared_engine.py shows it on the real engine."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from homelab.cli import app
from homelab.engine import compose as apply
from homelab.runtime import docker as docker_module
from tests.fakes.docker import FakeDocker
from tests.fakes.swarm import FakeSwarm, node
from tests.fakes.zfs import FakeZfs
from tests.unit.conftest import Deployment

runner = CliRunner()


class Engines:
    """Both fakes; `kind` says which one the config runs on."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.docker, self.swarm = FakeDocker(), FakeSwarm()

    def break_service(self, service: str, *, compose: dict[str, object], swarm: tuple[str, str]) -> None:
        """Compose: the container's fields become `compose`; Swarm: its task ends as (state, error)."""
        if self.kind == "compose":
            self.docker.running = [
                replace(c, **compose) if c.service == service else c  # type: ignore[arg-type]
                for c in self.docker.running
            ]
        else:
            self.swarm.fail(service, *swarm)


def _engines(kind: str, deployment: Deployment, monkeypatch: pytest.MonkeyPatch) -> Engines:
    found = Engines(kind)
    monkeypatch.setattr(docker_module, "Docker", lambda: found.docker)
    monkeypatch.setattr(apply, "ZfsCli", FakeZfs)
    monkeypatch.setattr("homelab.runtime.swarm.SwarmCli", lambda: found.swarm)
    monkeypatch.setattr("homelab.engine.swarm.POLL_SECONDS", 0)
    monkeypatch.setattr("homelab.engine.health.POLL_SECONDS", 0)
    if kind == "swarm":
        text = deployment.config.read_text().replace("version: 1\n", "version: 1\nengine: swarm\n", 1)
        deployment.config.write_text(text)
    return found


@pytest.fixture(params=["compose", "swarm"])
def engines(request: pytest.FixtureRequest, deployment: Deployment, monkeypatch: pytest.MonkeyPatch) -> Engines:
    return _engines(request.param, deployment, monkeypatch)


@pytest.fixture
def compose(deployment: Deployment, monkeypatch: pytest.MonkeyPatch) -> Engines:
    return _engines("compose", deployment, monkeypatch)


@pytest.fixture
def swarm(deployment: Deployment, monkeypatch: pytest.MonkeyPatch) -> Engines:
    return _engines("swarm", deployment, monkeypatch)


def _run(deployment: Deployment, *args: str):  # type: ignore[no-untyped-def]
    extra = ["--out", str(deployment.out)] if args[0] in ("up", "down", "logs") else []
    return runner.invoke(app, [*args, "--config", str(deployment.config), *extra])


def test_up_with_nothing_to_change_still_checks_and_names_the_reason(deployment: Deployment, engines: Engines) -> None:
    first = _run(deployment, "up", "edge", "dev", "--timeout", "5")
    assert first.exit_code == 0, first.output
    engines.break_service(
        "gitea",
        compose={"health": "unhealthy", "health_output": "GET /api/healthz: connection refused"},
        swarm=("rejected", "bind source path does not exist: /tank/homelab/gitea/data"),
    )
    again = _run(deployment, "up", "edge", "dev", "--timeout", "5")
    assert again.exit_code == 1, again.output
    reason = {
        "compose": "unhealthy; last health check: GET /api/healthz: connection refused",
        "swarm": "rejected: bind source path does not exist: /tank/homelab/gitea/data",
    }[engines.kind]
    assert "error: up: 1 declared service(s) not running and healthy:\n" in again.output, again.output
    assert f"  dev/gitea: {reason}\n" in again.output
    status = _run(deployment, "status")
    assert status.exit_code == 1
    assert f"down: dev/gitea: {reason}\n" in status.output, status.output


def test_up_of_a_stack_answers_for_the_edge_it_is_served_through(deployment: Deployment, engines: Engines) -> None:
    assert _run(deployment, "up", "edge", "dev", "--timeout", "5").exit_code == 0
    engines.break_service(
        "traefik",
        compose={"state": "exited", "exit_code": 0},
        swarm=("failed", "task: non-zero exit (1)"),
    )
    result = _run(deployment, "up", "dev", "--timeout", "5")
    assert result.exit_code == 1, result.output
    reason = {"compose": "exited (exit code 0)", "swarm": "failed: task: non-zero exit (1)"}[engines.kind]
    assert f"  edge/traefik: {reason}\n" in result.output, result.output


def test_a_healthy_declared_state_passes(deployment: Deployment, engines: Engines) -> None:
    assert _run(deployment, "up", "edge", "dev", "--timeout", "5").exit_code == 0
    again = _run(deployment, "up", "edge", "dev", "--timeout", "5")
    assert again.exit_code == 0, again.output
    assert "up: nothing to apply; all " in again.output
    assert _run(deployment, "status").exit_code == 1  # the stacks not brought up are absent


def test_compose_names_an_oom_kill_and_the_last_output(deployment: Deployment, compose: Engines) -> None:
    assert _run(deployment, "up", "edge", "dev", "--timeout", "5").exit_code == 0
    oom = {"state": "restarting", "exit_code": 137, "oom_killed": True, "id": "c-rstudio"}
    compose.break_service("rstudio", compose=oom, swarm=("", ""))
    compose.docker.logs["c-rstudio"] = "rserver starting\nallocating the session cache"
    compose.docker.ends["rstudio"] = oom  # the start `up` asks for ends the same way
    said = "restarting (exit code 137, OOM-killed at its memory limit); last output: rserver starting | allocating"
    result = _run(deployment, "up", "edge", "dev", "--timeout", "5")
    assert result.exit_code == 1, result.output
    assert f"stack dev: service rstudio {said}" in result.output, result.output
    compose.docker.running = [c for c in compose.docker.running if c.service != "rstudio"]
    compose.break_service("gitea", compose={}, swarm=("", ""))
    status = _run(deployment, "status")
    assert status.exit_code == 1
    assert "down: dev/rstudio: no container" in status.output, status.output


def test_compose_names_a_bind_source_that_no_longer_exists(
    deployment: Deployment, compose: Engines, tmp_path: Path
) -> None:
    assert _run(deployment, "up", "edge", "dev", "--timeout", "5").exit_code == 0
    gone = tmp_path / "tank" / "gitea" / "data-removed"
    mounts = ({"Type": "bind", "Source": str(gone), "Destination": "/data"},)
    compose.break_service("gitea", compose={"mounts": mounts}, swarm=("", ""))
    result = _run(deployment, "up", "edge", "dev", "--timeout", "5")
    assert result.exit_code == 1, result.output
    assert f"dev/gitea: running, but its bind source path does not exist: {gone}" in result.output


def test_swarm_names_the_node_a_task_ran_on_when_it_is_down(deployment: Deployment, swarm: Engines) -> None:
    edge = node("edge-node", id="n-edge", role="worker", labels={"homelab.edge": "true"})
    swarm.swarm.nodes_list = [node("nas"), edge]
    assert _run(deployment, "up", "edge", "dev", "--timeout", "5").exit_code == 0
    swarm.swarm.nodes_list = [node("nas"), replace(edge, state="down")]
    swarm.swarm.fail(
        "traefik", "pending", "no suitable node (1 node not available)", desired="running", node_id="n-edge"
    )
    result = _run(deployment, "up", "--timeout", "5")
    assert result.exit_code == 1, result.output
    assert "edge/traefik: pending: no suitable node (1 node not available); node edge-node is down" in result.output, (
        result.output
    )
    # the rate-limit guard cannot read acme.json there: said, and up goes on to name the node
    assert "certificate guard skipped: the edge's store cannot read it on its node: node edge-node is down" in (
        result.output
    )


def test_swarm_first_up_whose_task_is_rejected_names_swarms_reason(deployment: Deployment, swarm: Engines) -> None:
    reason = "bind source path does not exist: /tank/homelab/edge/acme"
    swarm.swarm.rejected["traefik"] = reason
    first = _run(deployment, "up", "edge", "--timeout", "5")
    assert first.exit_code == 1
    assert f"traefik: rejected: {reason}" in first.output, first.output
    again = _run(deployment, "up", "edge", "--timeout", "5")
    assert again.exit_code == 1
    assert f"edge/traefik: rejected: {reason}" in again.output, again.output
