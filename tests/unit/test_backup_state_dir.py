"""backup.state_dir: one setting read by the backup commands and by the collectd exec that reports them."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from homelab.backup.context import STATE_ENV, default_state_dir
from homelab.config.loader import load
from homelab.plan import build_plan
from homelab.render.collectd import backup_status_script


def _with_state_dir(config: Path, state_dir: str | None) -> Path:
    data = yaml.safe_load(config.read_text())
    if state_dir:
        data["backup"]["state_dir"] = state_dir
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    return config


def test_default_is_under_the_storage_mountpoint(example_config: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(STATE_ENV, raising=False)
    loaded = load(_with_state_dir(example_config, None))
    expected = f"{loaded.config.storage.mountpoint}/.homelab/backup"
    assert default_state_dir(loaded) == Path(expected)
    assert f'"{expected}/$remote.last_success"' in backup_status_script(build_plan(loaded))


def test_configured_state_dir_is_where_runs_and_monitoring_meet(
    example_config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(STATE_ENV, raising=False)
    loaded = load(_with_state_dir(example_config, "/var/lib/homelab/backup"))
    assert default_state_dir(loaded) == Path("/var/lib/homelab/backup")
    assert '"/var/lib/homelab/backup/$remote.last_success"' in backup_status_script(build_plan(loaded))
    monkeypatch.setenv(STATE_ENV, "/elsewhere")  # the environment still wins for one command
    assert default_state_dir(loaded) == Path("/elsewhere")
