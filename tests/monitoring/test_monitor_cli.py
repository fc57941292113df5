"""`homelab monitor size`: series count and whisper bytes of the catalog."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from homelab.cli.monitor import monitor_app
from homelab.config.loader import load
from homelab.monitoring.catalog_builder import catalog_for
from homelab.plan import build_plan


def test_size_prints_series_and_bytes(example_config: Path) -> None:
    catalog = catalog_for(build_plan(load(example_config)))
    result = CliRunner().invoke(monitor_app, ["size", "--config", str(example_config)])
    assert result.exit_code == 0, result.output
    assert f"series: {len(catalog.series)}\n" in result.output
    assert f"whisper bytes: {catalog.whisper_bytes()} (" in result.output
    assert "retentions: 10s:1d,1m:30d,10m:1y,1h:5y (interval 10s)" in result.output
    assert "1778464 bytes per series" in result.output


def test_size_reports_a_bad_config(tmp_path: Path) -> None:
    result = CliRunner().invoke(monitor_app, ["size", "--config", str(tmp_path / "missing.yaml")])
    assert result.exit_code == 2
