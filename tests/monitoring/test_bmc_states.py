"""The discrete sensors' collectd python plugin (homelab/monitoring/bmc_states.py) outside collectd:
its reading of `ipmitool sensor` (the corpus listings), of the ipmi include homelab renders, and what
it dispatches; and how discovery, collectd.conf and the dashboard carry discrete sensors. The real
collectd runs it in tests/monitoring/test_corpus_pipeline.py."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from homelab import discover as disc
from homelab.config.loader import load
from homelab.layout import COLLECTD_IPMI_INCLUDE
from homelab.metrics import catalog_for
from homelab.monitoring import bmc_states
from homelab.monitoring import inventory as inv
from homelab.plan import build_plan
from homelab.render import render_all
from homelab.render.collectd import ipmi_conf
from tests.monitoring.test_discover import CORPUS, SECRETS, hpe, with_inventory

HPE_SENSOR = (CORPUS / "hpe-proliant-dl360-gen9-ipmitool-sensor.txt").read_text()


def test_discovery_keeps_the_states_of_discrete_sensors() -> None:
    found = disc.discover(hpe(), None).inventory
    states = {e.name: e.states for e in found.discrete()}
    assert len(states) == 13  # the listing's discrete rows with states (two print `na`)
    assert states["Fan 1 Presence"] == 0x0280 and states["Sys Health LED"] == 0x0180
    assert all(not e.hide for e in found.discrete())


def test_check_reports_a_discrete_sensor_gone() -> None:
    found = disc.discover(hpe(), None).inventory
    bmc = hpe()
    bmc.sensor_text = "\n".join(line for line in bmc.sensor_text.splitlines() if not line.startswith("UID "))
    assert disc.check(bmc, found).missing == ("UID",) and disc.check(hpe(), found).clean


def test_states_of_the_configured_sensors_from_ipmitool_sensor() -> None:
    sensors = [("Fan 1 Presence", "fan_1_presence"), ("Power Supplies", "power_supplies"), ("02-CPU 1", "cpu")]
    found = dict(bmc_states.states(HPE_SENSOR, sensors))
    assert found["fan_1_presence"] == 0x0280
    assert "cpu" not in found  # an analog row is the ipmi plugin's
    # same-named sensors are told apart by their order
    row = "A | 0x0 | discrete | {}| na | na | na | na | na | na\n"
    twice = row.format("0x0100") + row.format("0x0200")
    assert bmc_states.states(twice, [("A", "a_1"), ("A", "a_2")]) == [("a_1", 0x0100), ("a_2", 0x0200)]


def test_the_lan_settings_come_from_the_include_homelab_renders() -> None:
    text = ipmi_conf("192.168.1.20", "mon\\itor", 'pa"ss\\word')
    assert bmc_states.lan_settings(text) == {
        "Address": "192.168.1.20",
        "Username": "mon\\itor",
        "Password": 'pa"ss\\word',
    }
    argv, env = bmc_states.command(bmc_states.lan_settings(text), 3)
    assert argv == ["ipmitool", "-I", "lanplus", "-H", "192.168.1.20", "-U", "mon\\itor", "-E", "-C", "3", "sensor"]
    assert env["IPMI_PASSWORD"] == 'pa"ss\\word' and 'pa"ss\\word' not in argv
    assert bmc_states.command({}, None)[0] == ["ipmitool", "sensor"]  # the local BMC


@dataclass
class Node:
    key: str
    values: tuple[Any, ...] = ()
    children: list[Node] = field(default_factory=list)


@dataclass
class FakeCollectd:
    """collectd's python module as the plugin uses it (register_*, Values(...).dispatch, warning)."""

    dispatched: list[tuple[str, str, str, list[float]]] = field(default_factory=list)
    callbacks: list[Any] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def register_config(self, callback: Any) -> None:
        self.callbacks.append(callback)

    def register_read(self, callback: Any) -> None:
        self.callbacks.append(callback)

    def warning(self, text: str) -> None:
        self.warnings.append(text)

    def Values(self, plugin: str, type: str, type_instance: str) -> Any:
        fake = self

        class Values:
            def dispatch(self, values: list[float]) -> None:
                fake.dispatched.append((plugin, type, type_instance, values))

        return Values()


def test_a_read_dispatches_each_sensors_states(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    include = tmp_path / "ipmi.conf"
    include.write_text(ipmi_conf("10.0.0.9", "monitor", "secret"))
    collectd = FakeCollectd()
    reader = bmc_states.register(collectd)
    reader.configure(Node("Module", ("bmc_states",), [
        Node("IpmiConfig", (str(include),)), Node("CipherSuite", (3.0,)),
        Node("Sensor", ("Fan 1 Presence", "fan_1_presence")), Node("Sensor", ("UID", "uid")),
    ]))  # fmt: skip
    calls: list[tuple[list[str], dict[str, str]]] = []

    def run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        calls.append((argv, kwargs["env"]))
        return subprocess.CompletedProcess(argv, 0, HPE_SENSOR, "")

    monkeypatch.setattr(bmc_states.subprocess, "run", run)
    reader.read()
    assert collectd.dispatched == [
        ("bmc_state", "gauge", "uid", [0x0280]),
        ("bmc_state", "gauge", "fan_1_presence", [0x0280]),
    ]
    assert (
        calls[0][0][:5] == ["ipmitool", "-I", "lanplus", "-H", "10.0.0.9"] and calls[0][1]["IPMI_PASSWORD"] == "secret"
    )

    def gone(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        raise subprocess.TimeoutExpired(argv, 60)

    monkeypatch.setattr(bmc_states.subprocess, "run", gone)
    reader.read()
    assert len(collectd.dispatched) == 2 and "ipmitool sensor" in collectd.warnings[0]


def test_collectd_conf_and_the_status_panel_carry_the_discrete_sensors(example_config: Path) -> None:
    config = with_inventory(example_config)
    raw = yaml.safe_load(config.read_text())
    raw["monitoring"]["ipmi"] = {"mode": "lan", "address": "10.0.0.9", "username": "monitor",
                                 "password_file": "secrets/bmc", "cipher_suite": 3}  # fmt: skip
    config.write_text(yaml.safe_dump(raw, sort_keys=False))
    (config.parent / "secrets" / "bmc").write_text("pw")
    (config.parent / "secrets" / "bmc").chmod(0o600)
    found = disc.discover(hpe(), None).inventory
    renamed = found.model_copy(
        update={"bmc": [e.model_copy(update={"name": 'UID "front"'}) if e.name == "UID" else e for e in found.bmc]}
    )
    (config.parent / "inventory.yaml").write_text(inv.dump(renamed))
    plan = build_plan(load(config))
    catalog = catalog_for(plan)
    assert len(catalog.select(plugin="bmc_state")) == 13
    files = render_all(plan, {**SECRETS, "secrets/bmc": "pw"}).files
    conf = files["monitoring/collectd/collectd.conf"].decode()
    assert "<LoadPlugin python>\n  Globals true\n</LoadPlugin>" in conf
    assert 'Import "bmc_states"' in conf and f'IpmiConfig "{COLLECTD_IPMI_INCLUDE}"' in conf
    assert '    Sensor "UID \\"front\\"" "uid"' in conf and '    Sensor "Fan 1 Presence" "fan_1_presence"' in conf
    assert "CipherSuite 3" in conf
    assert files["monitoring/collectd/bmc_states.py"] == Path(bmc_states.__file__).read_bytes()
    assert "COPY bmc_states.py /usr/local/lib/homelab/bmc_states.py" in files["monitoring/collectd/Dockerfile"].decode()
    thermals = json.loads(files["monitoring/grafana/dashboards/thermals-fans.json"])
    panel = next(p for p in thermals["panels"] if p["title"] == "BMC status (discrete sensors)")
    assert len(panel["targets"]) == 13 and panel["type"] == "stat"
    fan = next(o for o in panel["fieldConfig"]["overrides"] if o["matcher"]["options"] == "Fan 1 Presence")
    assert fan["properties"][0]["value"][0]["options"] == {
        "640": {"text": "as discovered", "color": "green", "index": 0}
    }
