"""A rendered example deployment on tmp_path, for the fast tests of apply, storage and the stack commands
(the Docker Engine and ZFS are replaced by the recording fakes of tests/fakes)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from homelab.config.loaded import LoadedConfig
from homelab.config.loader import load
from homelab.plan_model import Plan
from homelab.project import render_project


@dataclass
class Deployment:
    config: Path
    loaded: LoadedConfig
    plan: Plan
    out: Path  # the rendered stacks folder
    mount: Path  # storage.mountpoint


@pytest.fixture
def deployment(example_config: Path, tmp_path: Path) -> Deployment:
    mount = tmp_path / "tank"
    text = example_config.read_text().replace("mountpoint: /tank/homelab", f"mountpoint: {mount}")
    example_config.write_text(text)
    loaded = load(example_config)
    result = render_project(loaded, tmp_path / "stacks")
    return Deployment(example_config, loaded, result.plan, result.out, mount)
