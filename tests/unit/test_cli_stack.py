"""up, down, status, logs in-process, with the Docker Engine and ZFS replaced by the recording fakes:
exact messages and exit codes (tests/docker runs the same commands against the real engine)."""

from __future__ import annotations

import base64
import datetime as dt
import json
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from homelab.cli import app
from homelab.engine import compose as apply
from homelab.errors import CommandFailed
from homelab.runtime import docker as docker_module
from homelab.runtime import process
from tests.fakes.docker import FakeDocker, container
from tests.fakes.zfs import FakeZfs
from tests.unit.conftest import Deployment

runner = CliRunner()
ALL = ["edge", "media", "cloud", "dev", "monitoring"]


@pytest.fixture
def engine(monkeypatch: pytest.MonkeyPatch) -> FakeDocker:
    fake = FakeDocker()
    monkeypatch.setattr(docker_module, "Docker", lambda: fake)
    monkeypatch.setattr(apply, "ZfsCli", FakeZfs)
    return fake


def _run(deployment: Deployment, *args: str):  # type: ignore[no-untyped-def]
    extra = ["--out", str(deployment.out)] if args[0] in ("up", "down", "logs") else []
    return runner.invoke(app, [*args, "--config", str(deployment.config), *extra])


def test_up_dry_run_shows_the_plan_and_changes_nothing(deployment: Deployment, engine: FakeDocker) -> None:
    result = _run(deployment, "up", "dev", "--dry-run")
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        "  create    dev/gitea  (new)",
        "  create    dev/jenkins  (new)",
        "  create    dev/rstudio  (new)",
        "3 to create, 0 unchanged",
    ]
    assert engine.changes() == []


def test_up_applies_every_stack_then_finds_nothing_to_do(deployment: Deployment, engine: FakeDocker) -> None:
    result = _run(deployment, "up")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert "  create    edge/traefik  (new)" in lines
    assert "edge: applying, waiting up to 300s for health" in lines
    assert lines[-1].startswith("up: edge, media, cloud, dev, monitoring applied; all healthy in ")
    assert engine.changes() == [("up", f"homelab-{s}") for s in ALL]

    again = _run(deployment, "up")
    assert again.exit_code == 0, again.output
    lines = again.output.splitlines()  # 3 edge, 1 media, 4 cloud, 3 dev, 3 monitoring
    assert lines[0] == "no changes: 14 services up to date"
    assert lines[1].startswith("up: nothing to apply; all healthy in "), lines


def test_up_with_an_unhealthy_service_exits_1_naming_it(deployment: Deployment, engine: FakeDocker) -> None:
    engine.health["gitea"] = "unhealthy"
    result = _run(deployment, "up", "dev", "monitoring", "--timeout", "5")
    assert result.exit_code == 1
    assert "error: stack dev: service gitea is unhealthy; last health check: (no output)\n" in result.output
    assert result.output.endswith("  stacks not applied: monitoring\n")


def test_up_refuses_an_unknown_stack(deployment: Deployment, engine: FakeDocker) -> None:
    result = _run(deployment, "up", "mail")
    assert result.exit_code == 2
    assert result.output == "unknown stack 'mail' (this config has: edge, media, cloud, dev, monitoring)\n"


def test_up_without_an_engine_exits_4(deployment: Deployment, engine: FakeDocker) -> None:
    engine.version = None
    result = _run(deployment, "up")
    assert result.exit_code == 4  # environment missing
    assert result.output == "error: Docker Engine not reachable: Cannot connect to the Docker daemon\n"


def test_down_stops_what_runs_in_reverse_order(deployment: Deployment, engine: FakeDocker) -> None:
    engine.running = [container("homelab-edge", "traefik"), container("homelab-dev", "gitea")]
    result = _run(deployment, "down")
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == ["dev: stopping", "edge: stopping", "down: dev, edge stopped; data kept"]
    assert _run(deployment, "down").output == "down: nothing was running\n"


def _acme_with_certificate(path: Path, host: str, not_after: dt.datetime) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(x509.NameOID.COMMON_NAME, host)])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(not_after - dt.timedelta(days=90))
        .not_valid_after(not_after)
        .sign(key, hashes.SHA256())
    )
    pem = cert.public_bytes(serialization.Encoding.PEM)
    entry = {"domain": {"main": host, "sans": ["www." + host]}, "certificate": base64.b64encode(pem).decode()}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"le": {"Certificates": [entry]}}))


def test_status_table_and_its_exit_code(deployment: Deployment, engine: FakeDocker) -> None:
    acme = deployment.mount / "edge" / "acme" / "acme.json"
    _acme_with_certificate(acme, "git.example.com", dt.datetime(2031, 5, 17, 12, 0, tzinfo=dt.UTC))
    up = _run(deployment, "up")
    assert up.exit_code == 0, up.output
    engine.running = [c for c in engine.running if c.service != "rstudio"]
    # gitea was OOM-killed at its 1 GiB limit and restarted twice by its policy; uses 200 MiB now
    engine.running = [
        replace(c, oom_killed=True, restart_count=2, memory_limit=1 << 30) if c.service == "gitea" else c
        for c in engine.running
    ]
    engine.memory = {c.id: 200 << 20 for c in engine.running if c.service == "gitea"}
    result = _run(deployment, "status")
    assert result.exit_code == 1  # rstudio is absent
    lines = result.output.splitlines()
    assert lines[0].split() == [
        *("SERVICE", "STATE", "HEALTH", "IMAGE", "URL", "CERT", "EXPIRES", "LAST", "CHANGE", "MEMORY", "RESTARTS")
    ]
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert rows["dev/gitea"][1:3] == ["running", "healthy"]
    assert rows["dev/gitea"][4:6] == ["https://git.example.com", "2031-05-17"]
    assert rows["dev/gitea"][6:9] == ["2026-11-20", "10:00", "UTC"]
    assert rows["dev/gitea"][9:] == ["200", "MiB", "/", "1024", "MiB", "2", "(OOM-killed)"]
    assert rows["dev/jenkins"][4:8] == ["https://ci.example.com", "none", "yet", "2026-11-20"]
    assert rows["dev/jenkins"][-2:] == ["-", "0"]  # no usage reported, no limit on the fake's container
    assert rows["dev/rstudio"][1:3] == ["absent", "-"] and rows["dev/rstudio"][-2:] == ["-", "0"]
    assert rows["edge/socket-proxy"][4:6] == ["-", "-"]

    _run(deployment, "up", "dev")  # creates rstudio again
    assert _run(deployment, "status").exit_code == 0


def test_status_with_an_unreadable_acme_json_shows_no_expiry(deployment: Deployment, engine: FakeDocker) -> None:
    from homelab.engine import service_status as status

    acme = deployment.mount / "edge" / "acme" / "acme.json"
    acme.parent.mkdir(parents=True)
    acme.write_text("{not json")
    assert status.served_certificates(deployment.plan) == []
    rows = {(r.stack, r.service): r for r in status.status_rows(deployment.plan, engine)}
    assert rows[("dev", "gitea")].cert_expiry == "none yet"


def test_logs_streams_the_service_through_compose(
    deployment: Deployment, engine: FakeDocker, monkeypatch: pytest.MonkeyPatch
) -> None:
    streamed: list[list[str]] = []
    monkeypatch.setattr(process, "stream", lambda argv: streamed.append(list(argv)) or 130)
    result = _run(deployment, "logs", "gitea", "--tail", "20", "-f")
    assert result.exit_code == 130
    assert streamed == [["docker", "compose", "-p", "homelab-dev", "logs", "--no-color", "--tail", "20", "-f", "gitea"]]


def test_logs_of_an_unknown_service_lists_the_known_ones(deployment: Deployment, engine: FakeDocker) -> None:
    result = _run(deployment, "logs", "postfix")
    assert result.exit_code == 2
    assert result.output.startswith("unknown service 'postfix' (services: traefik, socket-proxy, ddclient, plex, ")


def test_a_failing_compose_down_is_reported(deployment: Deployment, engine: FakeDocker) -> None:
    def fail(project: str, stack_dir: Path | None, timeout: float = 300) -> None:
        raise CommandFailed(["docker", "compose", "down"], 1, "", "permission denied")

    engine.running = [container("homelab-dev", "gitea")]
    engine.down = fail  # type: ignore[method-assign]
    result = _run(deployment, "down", "dev")
    assert result.exit_code == 1
    assert "permission denied" in result.output
