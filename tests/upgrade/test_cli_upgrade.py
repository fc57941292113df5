"""`homelab upgrade --list` and `homelab rollback` in-process, on the recording fakes: messages, exit codes."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from homelab.cli import app
from homelab.runtime import docker as docker_module
from homelab.runtime import zfs as zfs_module
from homelab.upgrade import journal as upgrade_journal
from tests.fakes.docker import FakeDocker
from tests.unit.conftest import Deployment
from tests.upgrade.test_upgrade import _setup, _up

runner = CliRunner()


def _run(deployment: Deployment, *args: str):  # type: ignore[no-untyped-def]
    return runner.invoke(app, [*args, "--config", str(deployment.config), "--out", str(deployment.out)])


def test_list_says_when_there_are_no_upgrades(deployment: Deployment) -> None:
    result = _run(deployment, "upgrade", "--list")
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == ["no upgrades yet"]


def test_list_and_rollback_by_hand(deployment: Deployment, monkeypatch: pytest.MonkeyPatch) -> None:
    docker, zfs, _ = _setup(deployment)
    _up(deployment, docker, zfs)
    monkeypatch.setattr(docker_module, "Docker", lambda: docker)
    monkeypatch.setattr(zfs_module, "ZfsCli", lambda: zfs)
    listed = _run(deployment, "upgrade", "--list")
    assert listed.exit_code == 0, listed.output
    (line,) = listed.output.splitlines()
    assert line.startswith("dev ") and "upgraded" in line and "@homelab-upgrade-dev-" in line
    assert "gitea gitea/gitea:1.0.0-old -> " in line
    as_json = json.loads(_run(deployment, "upgrade", "--json").output)
    assert [r["state"] for r in as_json] == ["upgraded"]
    back = _run(deployment, "rollback", "dev", "--timeout", "30")
    assert back.exit_code == 0, back.output
    assert "rollback: dev is back on the version before" in back.output
    assert upgrade_journal.list_records(deployment.out)[0].state == "rolled-back"
    again = _run(deployment, "rollback", "dev")
    assert again.exit_code == 5  # ExitCode.REFUSED
    assert "error: dev: no upgrade to roll back (homelab upgrade --list shows them)" in again.output


def test_rollback_of_a_stack_never_upgraded_is_refused(deployment: Deployment, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeDocker()
    monkeypatch.setattr(docker_module, "Docker", lambda: fake)
    result = _run(deployment, "rollback", "media")
    assert result.exit_code == 5 and "media: no upgrade to roll back" in result.output
    assert fake.changes() == []


def test_status_reports_drift_and_up_repairs_it(deployment: Deployment, monkeypatch: pytest.MonkeyPatch) -> None:
    from homelab.engine import compose as apply
    from tests.fakes.zfs import FakeZfs

    fake = FakeDocker()
    monkeypatch.setattr(docker_module, "Docker", lambda: fake)
    monkeypatch.setattr(apply, "ZfsCli", FakeZfs)
    assert _run(deployment, "up", "edge", "dev").exit_code == 0  # `up dev` answers for the edge too
    index = next(i for i, c in enumerate(fake.running) if c.service == "jenkins")
    hand = tuple(e if not e.startswith("TZ=") else "TZ=UTC" for e in fake.running[index].env)
    fake.running[index] = fake.running[index].__class__(**{**fake.running[index].__dict__, "env": hand})
    status = _run(deployment, "status", "--json")
    found = json.loads(status.output)["drift"]
    assert [(d["service"], d["kind"], d["differences"]) for d in found] == [("jenkins", "changed", ["environment TZ"])]
    text = _run(deployment, "status").output
    assert "drift: dev/jenkins (homelab-dev-jenkins-1) changed by hand: environment TZ" in text
    repaired = _run(deployment, "up", "dev")
    assert repaired.exit_code == 0, repaired.output
    assert "repaired drift: dev/jenkins" in repaired.output
    assert json.loads(_run(deployment, "status", "--json").output)["drift"] == []
