"""Per-sensor changes in homelab.yaml (`monitoring.sensors`): applied over the inventory to the catalog,
the dashboards and the alert rules; one naming no sensor is refused with homelab.yaml's file and line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from homelab.config.loader import load
from homelab.errors import ConfigError
from homelab.monitoring import discover as disc
from homelab.monitoring.catalog_builder import catalog_for
from homelab.plan import build_plan
from homelab.render.alerts import alert_specs
from homelab.render.dashboards import dashboard_targets, dashboards
from tests.monitoring.test_discover import dell, with_inventory


def configure(example_config: Path, sensors: dict[str, Any] | None, inventory: bool = True) -> Path:
    config = with_inventory(example_config)
    raw = yaml.safe_load(config.read_text())
    if sensors is not None:
        raw["monitoring"]["sensors"] = sensors
    config.write_text(yaml.safe_dump(raw, sort_keys=False))
    if inventory:
        (config.parent / "inventory.yaml").write_text(disc.dump(disc.discover(dell(), None).inventory))
    return config


def line_of(config: Path, text: str) -> int:
    return next(n for n, line in enumerate(config.read_text().splitlines(), start=1) if line.strip() == text)


def test_label_hide_and_thresholds_change_panels_and_rules(example_config: Path) -> None:
    config = configure(
        example_config,
        {
            "Fan1": {"label": "Front fan", "thresholds": {"lower_critical": 1500}},
            "temp_3_1": {"label": "CPU 1", "thresholds": {"upper_critical": 70}},
            "Fan6": {"hide": True},
        },
    )
    plan = build_plan(load(config))
    catalog = catalog_for(plan)
    paths = {s.path for s in catalog.select(plugin="ipmi")}
    assert "collectd.nas.ipmi.fanspeed-fan6" not in paths and len(paths) == 9
    specs = {s.uid: s for s in alert_specs(plan, catalog)}
    assert specs["fanspeed-fan1-low"].threshold == 1500 and specs["fanspeed-fan1-low"].title.startswith("Front fan")
    assert specs["temperature-temp-3-1-high"].threshold == 70
    assert not any("fan6" in uid for uid in specs)
    targets = dashboard_targets(dashboards(catalog))
    assert "alias(collectd.nas.ipmi.fanspeed-fan1,'Front fan')" in targets
    assert "alias(collectd.nas.ipmi.temperature-temp_3_1,'CPU 1')" in targets
    # the inventory file itself is left as discover wrote it
    assert "Front fan" not in (config.parent / "inventory.yaml").read_text()


def test_a_change_naming_no_sensor_points_at_its_line(example_config: Path) -> None:
    config = configure(example_config, {"Fan9": {"hide": True}, "Temp": {"label": "CPU"}, "Fan2": {"hide": True}})
    with pytest.raises(ConfigError) as caught:
        build_plan(load(config))
    assert caught.value.problems == [
        f"{config.resolve()}:{line_of(config, 'Fan9:')}: monitoring.sensors.Fan9: no sensor of the inventory is "
        "named or keyed so (did you mean 'Fan6', 'Fan5', 'Fan4'?)",
        f"{config.resolve()}:{line_of(config, 'Temp:')}: monitoring.sensors.Temp: 2 sensors have this name: "
        "name one by its key (temp_3_1, temp_3_2)",
    ]


def test_changes_without_an_inventory_are_refused(example_config: Path) -> None:
    config = configure(example_config, {"Fan1": {"hide": True}}, inventory=False)
    with pytest.raises(ConfigError) as caught:
        build_plan(load(config))
    [problem] = caught.value.problems
    assert problem.startswith(f"{config.resolve()}:{line_of(config, 'sensors:')}: monitoring.sensors: ")
    assert "homelab monitor discover" in problem


def test_an_unknown_override_field_is_a_config_error_with_its_line(example_config: Path) -> None:
    config = configure(example_config, {"Fan1": {"threshold": {"lower_critical": 1}}})
    with pytest.raises(ConfigError) as caught:
        load(config)
    [problem] = caught.value.problems
    assert problem.startswith(f"{config}:{line_of(config, 'threshold:')}: monitoring.sensors.Fan1.threshold: ")
