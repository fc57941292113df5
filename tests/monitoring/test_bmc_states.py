"""The discrete sensors' collectd python plugin (homelab/collectd_plugins/bmc_states.py) outside collectd:
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

from homelab.collectd_plugins import bmc_states
from homelab.config.loader import load
from homelab.layout import COLLECTD_IPMI_INCLUDE
from homelab.monitoring import discover as disc
from homelab.monitoring.catalog_builder import catalog_for
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
    (config.parent / "inventory.yaml").write_text(disc.dump(renamed))
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
    options = fan["properties"][0]["value"][0]["options"]
    # 0x0280: offset 1 of generic type 08h (IPMI 2.0 Table 42-2), "Device Present", as ipmitool's sdr elist says
    assert options["640"] == {"text": "as discovered: device present", "color": "green", "index": 0}
    assert options[str(0x0080)] == {"text": "no state asserted", "color": "red", "index": 2}  # offset 1 cleared
    assert options[str(0x0380)]["text"] == "device absent, device present"  # offset 0 set too


# `ipmitool sel info` / `sel elist` as ipmitool 1.8.19 prints them for ipmi_sim (tests/monitoring/
# test_corpus_pipeline.py adds such entries to a simulated BMC's SEL)
SEL_INFO = (
    "SEL Information\nVersion          : 1.5 (v1.5, v2 compliant)\nEntries          : {}\nFree Space : 16000 bytes\n"
)
SEL_ELIST = """\
   1 |  Pre-Init  |0000001023| Power Supply #0x41 | Failure detected | Asserted
   2 |  Pre-Init  |0000001023| Memory #0x42 | Correctable ECC | Asserted
   3 | 12/02/2026 | 11:45:01 | Temperature #0x30 | Upper Critical going high | Asserted | Reading 90 > Threshold 85
   4 | 12/02/2026 | 11:45:01 | Temperature #0x30 | Lower Non-critical going low | Asserted
   5 | 12/02/2026 | 11:46:01 | Temperature #0x30 | Upper Critical going high | Deasserted
   6 | 12/02/2026 | 11:47:01 | Memory #0x53 | Uncorrectable ECC | Asserted
   7 | 12/02/2026 | 11:47:01 | Physical Security #0x51 | General Chassis intrusion | Asserted
"""


def test_sel_counts_and_its_critical_entries() -> None:
    assert bmc_states.sel_entries(SEL_INFO.format(7)) == 7 and bmc_states.sel_entries("SEL has no entries") is None
    # failure, upper critical, uncorrectable ECC, intrusion; not correctable ECC, non-critical, deasserted
    assert bmc_states.critical_entries(SEL_ELIST) == 4


def test_a_read_counts_new_sel_entries(monkeypatch: pytest.MonkeyPatch) -> None:
    collectd = FakeCollectd()
    reader = bmc_states.register(collectd)
    reader.configure(Node("Module", ("bmc_states",), [Node("Sel", (True,))]))
    entries = [3]
    calls: list[list[str]] = []

    def run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        calls.append(argv[1:])
        if argv[1:3] == ["sel", "info"]:
            return subprocess.CompletedProcess(argv, 0, SEL_INFO.format(entries[0]), "")
        last = int(argv[-1])
        return subprocess.CompletedProcess(argv, 0, "".join(SEL_ELIST.splitlines(True)[-last:]), "")

    monkeypatch.setattr(bmc_states.subprocess, "run", run)
    reader.read()  # the first read: what the SEL held before is not new
    entries[0] = 7
    reader.read()  # four new: the last four rows, two of them critical
    entries[0] = 1
    reader.read()  # cleared, then one entry
    sel = [(d[2], d[3][0]) for d in collectd.dispatched]
    assert sel == [("new", 0), ("critical", 0), ("new", 4), ("critical", 2), ("new", 1), ("critical", 1)]
    assert calls == [["sel", "info"], ["sel", "info"], ["sel", "elist", "last", "4"], ["sel", "info"],
                     ["sel", "elist", "last", "1"]]  # fmt: skip
    assert not any(c == ["sensor"] for c in calls)  # no discrete sensor configured: no listing read
