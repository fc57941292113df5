"""Engine unreachable, compose missing or too old: `up` says so in one line and exits 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.docker

HOMELAB = str(Path(sys.executable).parent / "homelab")
CONFIG = """\
version: 1
server: {hostname: nas}
domain: {name: example.com, acme: {email: admin@example.com}}
storage: {mountpoint: %s}
apps:
  {plex: {enabled: false}, nextcloud: {enabled: false}, jenkins: {enabled: false}, rstudio: {enabled: false}}
monitoring: {enabled: false}
"""


def _up(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "homelab.yaml"
    config.write_text(CONFIG % (tmp_path / "tank"))
    full = {**os.environ, "HOME": str(tmp_path), **env}
    return subprocess.run(
        [HOMELAB, "up", "--config", str(config)],
        capture_output=True,
        text=True,
        env=full,
        timeout=120,
        check=False,
    )


def _one_line_exit_4(proc: subprocess.CompletedProcess[str], needle: str) -> None:
    assert proc.returncode == 4, proc.stdout + proc.stderr  # environment missing (docs/cli.md)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], proc.stderr
    assert not (Path(proc.args[-1]).parent / "stacks").exists()  # nothing rendered, nothing changed


def test_engine_unreachable(tmp_path: Path) -> None:
    _one_line_exit_4(_up(tmp_path, DOCKER_HOST="unix:///nonexistent/docker.sock"), "Docker Engine not reachable")


def test_compose_too_old(tmp_path: Path) -> None:
    fake = tmp_path / "bin" / "docker-compose"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 1.29.2\n")
    fake.chmod(0o755)
    proc = _up(tmp_path, HOMELAB_COMPOSE=str(fake), PATH=f"{fake.parent}:/usr/bin:/bin")
    _one_line_exit_4(proc, "is too old: homelab needs v2.20 or newer")


def test_compose_missing(tmp_path: Path) -> None:
    proc = _up(tmp_path, HOMELAB_COMPOSE=str(tmp_path / "no-such-compose"), PATH="/usr/bin:/bin")
    _one_line_exit_4(proc, "Compose")
