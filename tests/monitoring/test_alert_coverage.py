"""Issue 29: every sensor of every corpus board with a reading (and every discrete one with states) is
inside an alert rule on its value, not only a silent one; what the inventory says about each."""

from __future__ import annotations

from pathlib import Path

import pytest

from homelab.monitoring import classes, states
from homelab.monitoring import discover as disc
from homelab.monitoring import inventory as inv
from tests.conftest import EXAMPLE_SECRETS, write_secret
from tests.monitoring.alert_coverage import BOARDS, board_inventory, coverage, summary


@pytest.fixture
def project(example_config: Path) -> Path:
    for secret in EXAMPLE_SECRETS:
        if not (example_config.parent / "secrets" / secret).exists():
            write_secret(example_config.parent / "secrets" / secret, "x")
    return example_config


@pytest.mark.parametrize("board", list(BOARDS))
def test_every_sensor_with_a_reading_is_inside_a_rule_on_its_value(project: Path, board: str) -> None:
    covered = coverage(project, board)
    outside = [(c.name, c.rules) for c in covered if not c.valued]
    assert covered and not outside
    # and every one has its silent rule
    assert all(any(uid.startswith("silent") for uid in c.rules) for c in covered)


def test_the_corpus_counts(project: Path) -> None:
    every = [c for board in BOARDS for c in coverage(project, board)]
    counts = summary(every)
    print(counts)
    assert counts == {
        "temperature": (66, 66, 66), "fan": (40, 40, 40), "voltage": (44, 44, 44), "power": (14, 14, 14),
        "discrete": (51, 51, 51),
    }  # fmt: skip


def test_the_inventory_says_which_rule_and_why(tmp_path: Path) -> None:
    text = disc.dump(board_inventory("hpe-dl360-gen9"))
    path = tmp_path / "inventory.yaml"
    path.write_text(text)
    entries = {e["name"]: e for e in __import__("yaml").safe_load(text)["bmc"]}
    assert (
        entries["04-P1 DIMM 1-6"]["alerts"][0] == "above 89 °C (the inventory's limit: the BMC's, or yours)"
    )  # the BMC's own
    assert entries["11-PS 1 Inlet"]["sensor_class"] == "psu"
    assert entries["11-PS 1 Inlet"]["alerts"][0].startswith("20 °C above its median of the last day (psu default")
    assert entries["PS 2 Presence"]["alerts"][0].startswith("any change from its states at discovery (device absent")
    assert entries["Fan 1"]["alerts"] == [
        "30 % above its median of the last day (fans spun up: 30 points above their day median)",
        "silent: no reading for 5 minutes",
    ]
    assert entries["08-HD Max"]["alerts"] == []  # disabled: hidden, nothing collected
    assert inv.load(path) == board_inventory("hpe-dl360-gen9")  # `alerts` is for reading, not read back


@pytest.mark.parametrize(
    ("name", "entity", "cls"),
    [
        ("01-Inlet Ambient", 64, "inlet"), ("Inlet Temp", None, "inlet"), ("Ambient Temp", 7, "inlet"),
        ("02-CPU 1", 65, "cpu"), ("CPU Temp", None, "cpu"), ("Temp", 3, "cpu"),
        ("04-P1 DIMM 1-6", 32, "dimm"), ("CPU1_DIMMA1_Temp", None, "dimm"), ("DIMMA1 Temp", None, "dimm"),
        ("10-Chipset", 66, "pch"), ("PCH Temp", None, "pch"), ("13-VR P1", 20, "vrm"), ("15-VR P1 Mem", 20, "vrm"),
        ("CPU_VRM Temp", None, "vrm"), ("08-HD Max", 4, "disk"), ("NVMe_SSD Temp", None, "nvme"),
        ("M2_SSD1_Temp", None, "nvme"), ("11-PS 1 Inlet", 10, "psu"), ("PSU1 Temp", None, "psu"),
        ("GPU1 Temp", None, "gpu"), ("TR2 Temperature", None, "other"), ("29-Battery Zone", 40, "other"),
        ("Temp", 10, "psu"), ("Temp", 8, "dimm"),
    ],
)  # fmt: skip
def test_a_temperature_is_classed_by_entity_and_name(name: str, entity: int | None, cls: str) -> None:
    assert classes.classify(name, entity) == cls


@pytest.mark.parametrize(
    ("name", "nominal"),
    [("+12V", 12.0), ("12V", 12.0), ("-12V", -12.0), ("+3.3VSB", 3.3), ("P3V3", 3.3), ("P1V05_PCH", 1.05),
     ("5VCC", 5.0), ("+5VSB", 5.0), ("VCORE0_CPU1", None), ("VBAT", None), ("+VSOC_CPU1", None), ("3.3V", 3.3),
     ("VDIMM AB", None), ("1.5V PG", 1.5), ("+3V", 3.3), ("+3VSB", 3.3)],
)  # fmt: skip
def test_a_rail_s_nominal_voltage_comes_from_its_name(name: str, nominal: float | None) -> None:
    assert classes.nominal_volts(name) == nominal


def test_rail_bands() -> None:
    # ±10 %: ATX12V's widest regulation figure (Table 2), wide enough for a BMC's reading of a good rail
    assert classes.voltage_band(12.0) == pytest.approx((10.8, 13.2))
    assert classes.voltage_band(3.3) == pytest.approx((2.97, 3.63))
    assert classes.voltage_band(-12.0) == pytest.approx((-13.2, -10.8))
    assert classes.voltage_band(classes.nominal_volts("+3VSB") or 0)[1] > 3.48  # the C2750D4I's, a normal day


def test_state_bits_in_words() -> None:
    # `ipmitool sensor`'s 0x0280: offset 1 of the first byte, the reserved bit 7 of the second
    assert states.words(0x0280, "presence") == "device present"
    assert states.words(0x0180, "presence") == "device absent"
    assert states.words(0x0100 | 0x0800, "power_supply") == "presence detected, power supply input lost (AC/DC)"
    assert states.words(0x0200, "memory") == "uncorrectable ECC"
    assert states.words(0x0300, "processor") == "IERR, thermal trip"
    assert states.words(0x0100, "chassis_intrusion") == "general chassis intrusion"
    assert states.words(0x0001, "watchdog") == "timer interrupt"  # offset 8: bit 0 of the second byte
    assert states.words(0x0200, "redundancy") == "redundancy lost"
    assert states.words(0x0080, "memory") == "no state asserted"
    assert states.words(0x0100, "unknown") == "offset 0"
    assert (0x0100 | 0x0200, "presence detected, power supply failure detected") in states.changes(
        0x0100, "power_supply"
    )


@pytest.mark.parametrize(
    ("name", "entity", "bits", "text", "type_"),
    [
        ("PS 2 Presence", 10, 0x0180, "Device Absent", "presence"),
        ("Fans", 29, 0x0180, "Fully Redundant", "redundancy"),
        ("Memory Status", 7, 0x4080, "Presence Detected", "memory"),
        ("PSU1 AC Lost", 10, 0x0180, "Presence detected", "power_supply"),
        ("PSU1 Over Temp", 10, 0x0180, "Transition to OK", "severity"),
        ("Chassis Intru", 23, 0x0080, "", "chassis_intrusion"),
        ("Watchdog2", 1, 0x0080, "", "watchdog"),
        ("CPU1_ECC1", 8, 0x4080, "Presence Detected", "memory"),
        ("UID", 23, 0x0280, "", "unknown"),
    ],
)  # fmt: skip
def test_a_discrete_sensor_s_type_from_what_ipmitool_printed_then_its_name(
    name: str, entity: int, bits: int, text: str, type_: str
) -> None:
    assert states.guess_type(name, entity, bits, text) == type_


def test_homelab_yaml_switches_a_sensor_s_rules(project: Path) -> None:
    from homelab.config.monitoring import SensorOverride

    inventory = board_inventory("hpe-dl360-gen9")
    changed, problems = inv.with_overrides(
        inventory,
        {
            "11-PS 1 Inlet": SensorOverride(rise=0, silent=False),  # no baseline, no silent rule
            "04-P1 DIMM 1-6": SensorOverride(defaults=False),
            "37-Fuse": SensorOverride(rise=5),
        },
    )
    entries = {e.name: e for e in changed.bmc}
    from homelab.monitoring.watch import describe

    assert not problems
    assert describe(entries["11-PS 1 Inlet"]) == []
    assert (
        describe(entries["04-P1 DIMM 1-6"])[0] == "above 89 °C (the inventory's limit: the BMC's, or yours)"
    )  # the BMC's stays
    assert "5 °C above its median of the last day (the inventory's limit: the BMC's, or yours)" in describe(
        entries["37-Fuse"]
    )
