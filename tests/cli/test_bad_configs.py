"""The bad-config corpus: each file exits 2 with the exact location and message, writes nothing,
and a canary secret never shows up anywhere, at any verbosity."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from homelab.cli import app
from homelab.cli import commands as _commands  # noqa: F401 - registers the commands
from tests.conftest import REPO, write_secret

BAD = REPO / "tests" / "fixtures" / "bad"
CANARY = "CANARY-7f3e9c1d-never-print-me"

EXPECTED = {
    "typo-key": "homelab.yaml:13: apps.plex.subdomian: unknown key (did you mean 'subdomain'?)",
    "wrong-type": "homelab.yaml:4: server.uid: Input should be a valid integer, unable to parse string as an integer",
    "bad-hostname": (
        "homelab.yaml:3: server.hostname: 'NAS_box' is not a valid hostname (lowercase letters, digits, '-', dots)"
    ),
    "duplicate-subdomain": "homelab.yaml:15: apps.gitea.subdomain: subdomain 'media' is already used by plex",
    "duplicate-port": "homelab.yaml:12: edge.https_port: port 2222 is already used by apps.gitea.ssh_port",
    "missing-acme-email": "homelab.yaml:6: domain.acme.email: required key is missing",
    "secret-missing": "homelab.yaml:13: ddns.password_file: secret file 'secrets/cf-token' does not exist",
    "secret-world-readable": (
        "homelab.yaml:13: ddns.password_file: secret file 'secrets/readable' is readable by others (mode 0644); "
        "run: chmod 600 secrets/readable"
    ),
    "canary-next-to-error": "homelab.yaml:14: ddns.interval: Input should be greater than or equal to 60",
    "invalid-yaml": "homelab.yaml:4: invalid YAML: mapping values are not allowed here",
    "duplicate-key": "homelab.yaml:11: server: duplicate key (first set on line 2)",
    "unknown-top-level": "homelab.yaml:11: monitorring: unknown key (did you mean 'monitoring'?)",
    "wrong-version": "homelab.yaml:1: version: must be 1",
    "nginx-with-tls-challenge": (
        "homelab.yaml:6: domain.acme.challenge: the nginx edge gets certificates with certbot's webroot: "
        "use challenge 'http', not 'tls'"
    ),
    "dns-without-provider": "homelab.yaml:6: domain.acme: challenge 'dns' needs dns_provider",
    "relative-backup-state-dir": "homelab.yaml:13: backup.state_dir: 'backup-state' must be an absolute path",
}


def test_corpus_is_complete() -> None:
    assert sorted(p.stem for p in BAD.glob("*.yaml")) == sorted(EXPECTED)


def _workdir(tmp_path: Path, case: str) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(BAD / f"{case}.yaml", work / "homelab.yaml")
    write_secret(work / "secrets" / "canary", CANARY)
    readable = work / "secrets" / "readable"
    readable.write_text("readable\n")
    readable.chmod(0o644)
    return work


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("verbosity", [[], ["-vv"]], ids=["quiet", "debug"])
@pytest.mark.parametrize("command", ["validate", "render", "plan", "doctor"])
@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_bad_config_exits_2_with_location_and_changes_nothing(
    tmp_path: Path, case: str, command: str, verbosity: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    work = _workdir(tmp_path, case)
    os.chdir(work)
    before = _tree(work)
    result = CliRunner().invoke(app, [*verbosity, command, "-c", "homelab.yaml"])
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == EXPECTED[case]
    assert result.stdout == ""
    assert _tree(work) == before
    assert CANARY not in result.output + caplog.text


def test_many_problems_are_all_reported_in_file_order(tmp_path: Path) -> None:
    config = tmp_path / "homelab.yaml"
    config.write_text(
        "version: 1\nserver:\n  hostname: nas\n  gid: -1\ndomain:\n  name: localhost\n  acme:\n    email: nope\n"
    )
    result = CliRunner().invoke(app, ["validate", "-c", str(config)])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        f"{config}:4: server.gid: Input should be greater than or equal to 0",
        f"{config}:6: domain.name: 'localhost' is not a valid domain name (e.g. example.com)",
        f"{config}:8: domain.acme.email: 'nope' is not an email address",
    ]


def test_missing_config_file(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["validate", "-c", str(tmp_path / "nope.yaml")])
    assert result.exit_code == 2
    assert result.stderr.strip() == f"{tmp_path / 'nope.yaml'}: no such file (create one with `homelab init`)"


def test_empty_config_file(tmp_path: Path) -> None:
    (tmp_path / "homelab.yaml").write_text("# nothing yet\n")
    result = CliRunner().invoke(app, ["validate", "-c", str(tmp_path / "homelab.yaml")])
    assert result.exit_code == 2
    assert "the file is empty" in result.stderr
