"""The generated systemd units pass `systemd-analyze verify` (the real parser, on this machine)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from homelab.backup.schedule import install, units
from homelab.cli.backup import backup_app
from homelab.config.loader import load
from homelab.errors import ConfigError
from tests.storage.zfs import write_config


@pytest.mark.real
def test_units_pass_systemd_analyze_verify(tmp_path: Path, require_program) -> None:
    analyze = require_program("systemd-analyze")
    config = write_config(
        tmp_path / "cfg",
        pool="tank",
        mountpoint=tmp_path / "srv",
        apps={"rstudio"},
        remote_dir=tmp_path / "remote",
        backup={"schedule": "Mon..Fri *-*-* 02:30:00"},
    )
    loaded = load(config)
    unit_dir = tmp_path / "units"
    paths = install(loaded, unit_dir, enable=False)
    assert sorted(p.name for p in paths) == sorted(units(loaded))
    timer = (unit_dir / "homelab-backup.timer").read_text()
    assert "OnCalendar=Mon..Fri *-*-* 02:30:00" in timer
    service = (unit_dir / "homelab-backup.service").read_text()
    assert f"backup run --config {config}" in service
    recovery = (unit_dir / "homelab-backup-recovery-drill.service").read_text()
    assert f"backup drill --recover --config {config}" in recovery
    assert "OnCalendar=*-*-15 05:00:00" in (unit_dir / "homelab-backup-recovery-drill.timer").read_text()
    proc = subprocess.run([analyze, "verify", *map(str, paths)], capture_output=True, text=True, check=False)
    ours = [line for line in proc.stderr.splitlines() if str(unit_dir) in line or "homelab-backup" in line]
    assert proc.returncode == 0 and not ours, proc.stderr
    # a broken calendar never reaches a unit: the config is refused at load (systemd-analyze calendar)
    bad = yaml.safe_load(config.read_text())
    bad["backup"]["schedule"] = "Funday 99:99"
    config.write_text(yaml.safe_dump(bad))
    with pytest.raises(ConfigError, match=r"backup.schedule: 'Funday 99:99' is not a systemd OnCalendar"):
        load(config)


def test_schedule_print(tmp_path: Path) -> None:
    config = write_config(
        tmp_path / "cfg", pool="tank", mountpoint=tmp_path / "srv", apps={"rstudio"}, remote_dir=tmp_path / "remote"
    )
    result = CliRunner().invoke(backup_app, ["schedule", "print", "--config", str(config)])
    assert result.exit_code == 0, result.output
    assert "# --- homelab-backup.timer" in result.output and "OnCalendar=*-*-* 03:00:00" in result.output


def test_the_systemd_driver_runs_systemctl(tmp_path: Path) -> None:
    from homelab.runtime.systemd import Systemctl

    calls = tmp_path / "calls"
    program = tmp_path / "systemctl"
    program.write_text(f'#!/bin/sh\necho "$@" >> {calls}\n')
    program.chmod(0o755)
    driver = Systemctl(str(program))
    driver.daemon_reload()
    driver.enable_now(["a.timer", "b.timer"])
    assert calls.read_text() == "daemon-reload\nenable --now a.timer b.timer\n"
