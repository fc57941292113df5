"""`--json` on validate, plan, status, doctor: one JSON document on stdout, as docs/cli.md describes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from homelab.checks import Check
from homelab.cli import app
from homelab.engine.service_status import ServiceStatus

runner = CliRunner()


def _document(stdout: str) -> dict[str, Any]:
    document = json.loads(stdout)  # exactly one document: json.loads refuses trailing text
    assert isinstance(document, dict)
    return document


def test_validate_json(example_config: Path) -> None:
    result = runner.invoke(app, ["validate", "--json", "-c", str(example_config)])
    assert result.exit_code == 0, result.output
    document = _document(result.stdout)
    assert document["ok"] is True
    assert document["config"] == str(example_config)
    assert set(document["stacks"]) == {"edge", "media", "cloud", "dev", "monitoring"}
    assert "traefik" in document["stacks"]["edge"] and document["stacks"]["media"] == ["plex"]


def test_validate_json_reports_problems_as_json(tmp_path: Path) -> None:
    (tmp_path / "homelab.yaml").write_text("version: 1\nbogus_key: 1\n")
    result = runner.invoke(app, ["validate", "--json"])
    assert result.exit_code == 2
    document = _document(result.stdout)
    assert document == {"ok": False, "exit_code": 2, "errors": result.stderr.splitlines()}
    assert any(line.startswith("homelab.yaml:2: bogus_key: unknown key") for line in document["errors"])


def test_plan_json(example_config: Path) -> None:
    runner.invoke(app, ["render", "-c", str(example_config)])
    example_config.write_text(example_config.read_text().replace("upload_limit: 16G", "upload_limit: 32G"))
    result = runner.invoke(app, ["plan", "--json", "-c", str(example_config)])
    assert result.exit_code == 0, result.output
    document = _document(result.stdout)
    assert document["ok"] is True
    assert document["out"] == str(example_config.parent / "stacks")
    assert document["stacks_affected"] == ["cloud"]
    changed = [c for c in document["changes"] if c["status"] != "identical"]
    assert changed == [{"path": "cloud/compose.yaml", "status": "changed", "secret": False}]
    secrets = [c for c in document["changes"] if c["secret"]]
    assert secrets and all(c["path"].startswith("secrets/") for c in secrets)
    assert set(secrets[0]) == {"path", "status", "secret"}  # a secret is named, never shown


def test_doctor_json_and_its_exit_code(example_config: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    checks = [Check("ok", "docker", "engine reachable"), Check("fail", "port 443", "in use")]
    monkeypatch.setattr("homelab.doctor.run_checks", lambda plan, **kwargs: checks)
    result = runner.invoke(app, ["doctor", "--json", "-c", str(example_config)])
    assert result.exit_code == 1
    document = _document(result.stdout)
    assert document.pop("budget")["reserved"] == 4416 << 20  # the memory budget on this machine (resources.md)
    assert document == {
        "ok": False,
        "failed": 1,
        "checks": [
            {"level": "ok", "name": "docker", "detail": "engine reachable"},
            {"level": "fail", "name": "port 443", "detail": "in use"},
        ],
    }


@pytest.mark.parametrize(
    ("health", "reason", "code"), [("healthy", "", 0), ("unhealthy", "unhealthy; last health check: refused", 1)]
)
def test_status_json(
    example_config: Path, monkeypatch: pytest.MonkeyPatch, health: str, reason: str, code: int
) -> None:
    row = ServiceStatus(
        "edge", "traefik", "running", health, "traefik:v3", "https://x", "2030-01-01", "1 h ago", reason=reason
    )
    monkeypatch.setattr("homelab.runtime.docker.Docker.check", lambda self: None)
    monkeypatch.setattr("homelab.engine.compose_engine.status_rows", lambda plan, docker: [row])
    monkeypatch.setattr("homelab.engine.compose_engine.status_drift", lambda plan, out, docker: [])
    result = runner.invoke(app, ["status", "--json", "-c", str(example_config)])
    assert result.exit_code == code, result.output
    assert _document(result.stdout) == {
        "ok": code == 0,
        "services": [
            {
                "stack": "edge",
                "service": "traefik",
                "state": "running",
                "health": health,
                "image": "traefik:v3",
                "url": "https://x",
                "cert_expiry": "2030-01-01",
                "last_change": "1 h ago",
                "memory": "-",
                "oom_killed": False,
                "restarts": 0,
                "reason": reason,
            }
        ],
        "drift": [],
        "unfinished": [],
    }


def test_environment_error_in_json_mode(example_config: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    result = runner.invoke(app, ["status", "--json", "-c", str(example_config)])
    assert result.exit_code == 4
    document = _document(result.stdout)
    assert document["ok"] is False and document["exit_code"] == 4
    assert document["errors"] == result.stderr.splitlines() and len(document["errors"]) == 1


def test_without_json_stdout_is_not_json(example_config: Path) -> None:
    result = runner.invoke(app, ["validate", "-c", str(example_config)])
    assert result.stdout == f"{example_config}: ok\n"


def test_internal_error_in_json_mode(example_config: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def crash(*args: object) -> None:
        raise ZeroDivisionError("division by zero")

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setattr("homelab.plan.build_plan", crash)
    result = runner.invoke(app, ["validate", "--json", "-c", str(example_config)])
    assert result.exit_code == 3
    document = _document(result.stdout)
    assert document["ok"] is False and document["exit_code"] == 3
    [line] = document["errors"]
    assert line.startswith("internal error (ZeroDivisionError: division by zero); the traceback is in ")
    assert str(tmp_path / "state" / "homelab") in line
