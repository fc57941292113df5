"""Units as BMCs print them: percent (fan duty, a supply's output current), amps, watts, RPM, volts, °C
and °F (converted: limits in °C in the inventory, the series converted by every query)."""

from __future__ import annotations

from pathlib import Path

import pytest

from homelab.monitoring.discover import discover
from homelab.monitoring.listing import parse
from tests.conftest import EXAMPLE_SECRETS, write_secret
from tests.monitoring.alert_coverage import Listed, rules_for

# `ipmitool sensor` rows in the layout of the corpus' Supermicro listing (X8DTU-F), with the units a
# Supermicro PMBus supply and a BMC in °F print
SENSOR = """\
CPU Temp         | 104.000    | degrees F  | ok    | na        | na        | na        | 176.000   | 185.000   | na
PS1 Curr Out %   | 12.000     | percent    | ok    | na        | na        | na        | na        | na        | na
PS1 Curr Out     | 4.500      | Amps       | ok    | na        | na        | na        | na        | 20.000    | na
PS1 Power In     | 120.000    | Watts      | ok    | na        | na        | na        | na        | na        | na
FAN1             | 4500.000   | RPM        | ok    | na        | 300.000   | 500.000   | na        | na        | na
12V              | 12.096     | Volts      | ok    | na        | na        | na        | na        | na        | na
"""


@pytest.fixture
def project(example_config: Path) -> Path:
    for secret in EXAMPLE_SECRETS:
        write_secret(example_config.parent / "secrets" / secret, "x")
    return example_config


def test_each_unit_is_read() -> None:
    kinds = {s.name: (s.kind, s.reading, s.unit) for s in parse(SENSOR).sensors}
    assert kinds == {
        "CPU Temp": ("temperature", 104.0, "degrees F"), "PS1 Curr Out %": ("current", 12.0, "percent"),
        "PS1 Curr Out": ("current", 4.5, "Amps"), "PS1 Power In": ("power", 120.0, "Watts"),
        "FAN1": ("fan", 4500.0, "RPM"), "12V": ("voltage", 12.096, "Volts"),
    }  # fmt: skip


def test_every_unit_gets_a_series_and_a_rule(project: Path) -> None:
    inventory = discover(Listed(("", SENSOR)), None).inventory  # type: ignore[arg-type]
    entries = {e.name: e for e in inventory.bmc}
    cpu = entries["CPU Temp"]
    assert not cpu.hide and cpu.fahrenheit and cpu.reading == 40.0
    assert (cpu.thresholds.upper_non_critical, cpu.thresholds.upper_critical) == (80.0, 85.0)  # 176 °F, 185 °F
    assert all(not e.hide for e in inventory.bmc)
    rules = {r["uid"]: r for r in rules_for(project, "units", inventory)}

    def target(uid: str) -> str:
        return str(rules[uid]["data"][0]["model"]["target"])

    def limit(uid: str) -> float:
        return float(rules[uid]["data"][2]["model"]["conditions"][0]["evaluator"]["params"][0])

    assert target("temperature-cpu-temp-high") == (
        "offset(scale(collectd.units.ipmi.temperature-cpu_temp,0.555556),-17.777778)"
    )
    assert limit("temperature-cpu-temp-high") == 85.0
    # the supply's current in percent of its rating: collectd's ipmi plugin types it "percent"
    assert target("percent-ps1-curr-out-pct-high") == "collectd.units.ipmi.percent-ps1_curr_out_pct"
    assert limit("percent-ps1-curr-out-pct-high") == 100.0
    assert limit("current-ps1-curr-out-high") == 20.0
    assert target("power-ps1-power-in-baseline") == (
        "diffSeries(collectd.units.ipmi.power-ps1_power_in,movingMedian(collectd.units.ipmi.power-ps1_power_in,'1d'))"
    )
    assert limit("power-ps1-power-in-baseline") == 60.0  # half its 120 W at discovery
    assert limit("fanspeed-fan1-low") == 300.0
    assert (limit("voltage-12v-low"), limit("voltage-12v-high")) == (pytest.approx(10.8), pytest.approx(13.2))
    for key in ("cpu-temp", "ps1-curr-out-pct", "ps1-curr-out", "ps1-power-in", "fan1", "12v"):
        assert any(uid.startswith("silent") and uid.endswith(key) for uid in rules), key


# a power supply and a fan block as `sdr elist` shows them on BMCs that give a discrete sensor a reading
# (HPE-style), with the same sensors in `ipmitool sensor` (discrete, states 0x0180 / 0x0280)
ELIST_WITH_READING = """\
Power Supply 1   | 3Dh | ok  | 10.1 | 225 Watts, Presence detected
Fan Block 1      | 45h | ok  | 29.1 | 35.28 percent, Fully Redundant
"""
SENSOR_DISCRETE = """\
Power Supply 1   | 0x1        | discrete   | 0x0180| na        | na        | na        | na        | na        | na
Fan Block 1      | 0x1        | discrete   | 0x0180| na        | na        | na        | na        | na        | na
"""


def test_a_discrete_sensor_with_a_reading_gets_a_state_series_and_rule(project: Path) -> None:
    inventory = discover(Listed((ELIST_WITH_READING, SENSOR_DISCRETE)), None).inventory  # type: ignore[arg-type]
    entries = {e.name: e for e in inventory.bmc}
    supply, block = entries["Power Supply 1"], entries["Fan Block 1"]
    assert (supply.kind, supply.states, supply.reading, supply.sensor_type) == (
        "discrete",
        0x0180,
        225.0,
        "power_supply",
    )
    assert (block.kind, block.sensor_type) == ("discrete", "redundancy")  # "Fully Redundant": generic 0Bh offset 0
    assert inventory.collected() == [] and inventory.discrete() == [supply, block]
    rules = {r["uid"]: r for r in rules_for(project, "hpe", inventory)}
    assert rules["state-power-supply-1"]["data"][0]["model"]["target"] == "collectd.hpe.bmc_state.gauge-power_supply_1"
    assert "presence detected" in rules["state-power-supply-1"]["annotations"]["summary"]
    assert "redundancy lost" in rules["state-fan-block-1"]["annotations"]["summary"]
