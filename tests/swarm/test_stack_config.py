"""The real consumer of the stack files: `docker stack config` (the docker CLI's own compose loader and
validation for `docker stack deploy`) accepts every stack file rendered for the example."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from homelab.config.loader import load
from homelab.project import render_project
from tests.swarm.test_render import swarm_config

pytestmark = pytest.mark.docker


def test_docker_stack_config_accepts_every_rendered_stack_file(
    example_dir: Path, tmp_path: Path, require_program
) -> None:  # type: ignore[no-untyped-def]
    docker = require_program("docker")
    out = tmp_path / "stacks"
    render_project(load(swarm_config(example_dir)), out)
    stack_files = sorted(out.glob("*/stack.yaml"))
    assert len(stack_files) == 5
    for stack_file in stack_files:
        text = stack_file.read_text()
        digests = {name: "0123456789ab" for name in re.findall(r"\$\{(HOMELAB_DIGEST_[A-Z0-9_]+)", text)}
        proc = subprocess.run(
            [docker, "stack", "config", "-c", str(stack_file)],
            capture_output=True,
            text=True,
            env={**os.environ, **digests},
            timeout=60,
            check=False,
        )
        assert proc.returncode == 0, f"{stack_file}: {proc.stderr}"
        assert "unsupported" not in proc.stderr.lower(), proc.stderr
        resolved = yaml.safe_load(proc.stdout)
        for name, secret in resolved.get("secrets", {}).items():
            assert secret["name"] == f"{name}-0123456789ab"
        for config in resolved.get("configs", {}).values():  # the files exist where the stack file says
            assert Path(config["file"]).is_file()
