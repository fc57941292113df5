"""The BMC listing parser over every published listing of the corpus (/work/shared/sdr-corpus, copied
into tests/fixtures/sdr-corpus). Every expected number below was counted by reading the file, not by
running the parser."""

from __future__ import annotations

from pathlib import Path

import pytest

from homelab.monitoring.listing import Thresholds, merge, parse

CORPUS = Path(__file__).parent.parent / "fixtures" / "sdr-corpus"


def listing(name: str):  # type: ignore[no-untyped-def]
    return parse((CORPUS / name).read_text())


# file -> (format, sensors, counts by kind, sensors with a reading, sensors with thresholds, skipped lines)
EXPECTED = {
    "asrock-c2750d4i-ipmi-sensors.txt": (
        "ipmi-sensors",
        18,
        {"voltage": 10, "fan": 6, "temperature": 2},
        15,
        0,
        1,  # FreeIPMI's header row
    ),
    "asus-esc8000a-e12-ipmitool-sdr-elist.txt": (
        "sdr-elist",
        107,
        # CPU2_ECC1 "Disabled" has neither unit nor a telling name: other
        {"temperature": 35, "voltage": 14, "fan": 11, "power": 10, "discrete": 36, "other": 1},
        # temps read: CPU1, TR2-5, 8 CPU1 DIMMs, Inlet; 10 voltages (the CPU1 rails and the board's), 11 fans,
        # 10 powers
        (1 + 4 + 8 + 1) + 10 + 11 + 10,
        0,
        0,
    ),
    "asus-esc8000a-e12-ipmitool-sensor.txt": (
        "sensor",
        107,
        {"temperature": 35, "voltage": 14, "fan": 11, "power": 10, "discrete": 37},
        # the same analog readings; a discrete row's hex state is a state, not a reading
        (1 + 4 + 8 + 1) + 10 + 11 + 10,
        35 + 14 + 11 + 4,  # all temps (upper), all volts (six), fans (lower), PSU Power Out (upper)
        0,
    ),
    "dell-poweredge-r720-ipmitool-sdr-type-temp-fan.txt": (
        "sdr-elist",
        11,
        {"temperature": 4, "fan": 6, "discrete": 1},
        10,
        0,
        0,
    ),
    "dell-poweredge-unnamed-idrac6-ipmitool-sdr-elist-all-TRUNCATED.txt": (
        "sdr-elist",
        24,
        # 11 temperature rows (all but Ambient Temp 0Eh disabled); ROMB Battery disabled = other
        {"temperature": 11, "discrete": 12, "other": 1},
        1,
        0,
        0,
    ),
    "hpe-proliant-dl360-gen10-ipmitool-sdr-elist-TRUNCATED.txt": (
        "sdr-elist",
        15,
        {"discrete": 2, "temperature": 7, "other": 6},
        7,
        0,
        0,
    ),
    "hpe-proliant-dl360-gen9-ipmitool-sdr-elist.txt": (
        "sdr-elist",
        71,
        # temperature: the 24 rows with a reading and the disabled "33-PCI 3 Zone", "34-HD Cntlr Zone" (by name);
        # the other disabled rows ("08-HD Max", "21-PCI 1"...) have no telling name: other
        {"discrete": 13, "temperature": 26, "other": 14, "fan": 14, "power": 4},
        24 + 14 + 4,
        0,
        0,
    ),
    "hpe-proliant-dl360-gen9-ipmitool-sensor.txt": (
        "sensor",
        71,
        {"discrete": 15, "temperature": 26, "other": 12, "fan": 14, "power": 4},
        24 + 14 + 4,
        33,  # every temperature with a threshold: 37 minus 11, 12, 19, 20
        0,
    ),
    "supermicro-unnamed-atom-board-ipmitool-sdr-elist-full.txt": (
        "sdr-elist",
        26,
        {"temperature": 7, "fan": 4, "voltage": 15},
        24,
        0,
        0,
    ),
    "supermicro-x8dtu-f-ipmitool-sdr-list.txt": (
        # CPU1/CPU2 Temp read "0 unspecified", as do Intrusion and PS Status
        "sdr-list",
        34,
        {"other": 4, "temperature": 13, "voltage": 9, "fan": 8},
        4 + 7 + 9 + 4,
        0,
        0,
    ),
    "supermicro-x8dtu-f-ipmitool-sensor.txt": (
        "sensor",
        34,
        {"discrete": 2, "temperature": 13, "voltage": 9, "fan": 8, "other": 2},
        7 + 9 + 4 + 2,  # System Temp and six DIMMs, all volts, four fans, Intrusion and PS Status (0.000)
        30,
        0,
    ),
}


def test_the_corpus_is_all_covered() -> None:
    assert sorted(p.name for p in CORPUS.glob("*.txt")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_counts_by_kind(name: str) -> None:
    fmt, total, kinds, read, with_thresholds, skipped = EXPECTED[name]
    found = listing(name)
    assert found.format == fmt
    assert len(found.sensors) == total
    assert found.by_kind() == kinds
    assert sum(1 for s in found.sensors if s.reading is not None) == read
    assert sum(1 for s in found.sensors if s.thresholds.any) == with_thresholds
    assert len(found.skipped) == skipped


def _one(name: str, sensor: str, index: int = 0):  # type: ignore[no-untyped-def]
    return [s for s in listing(name).sensors if s.name == sensor][index]


def test_negative_and_fractional_values_and_thresholds() -> None:
    rail = _one("supermicro-x8dtu-f-ipmitool-sensor.txt", "-12V")
    assert rail.kind == "voltage" and rail.reading == -11.804 and rail.unit == "Volts"
    assert rail.thresholds == Thresholds(-13.55, -13.356, -13.162, -10.834, -10.64, -10.446)
    board = _one("supermicro-x8dtu-f-ipmitool-sensor.txt", "System Temp")
    assert board.thresholds.lower_critical == -7.0 and board.thresholds.upper_critical == 77.0
    assert _one("supermicro-x8dtu-f-ipmitool-sdr-list.txt", "-12V").reading == -11.80


def test_one_sided_thresholds() -> None:
    cpu = _one("hpe-proliant-dl360-gen9-ipmitool-sensor.txt", "02-CPU 1")
    assert cpu.thresholds == Thresholds(upper_critical=70.0)
    fan = _one("asus-esc8000a-e12-ipmitool-sensor.txt", "SYS_FAN3")
    assert fan.thresholds == Thresholds(0.0, 520.0, 520.0, None, None, None)
    assert fan.reading == 17680.0 and fan.kind == "fan"


def test_percent_fans_and_readings_with_a_state() -> None:
    fan = _one("hpe-proliant-dl360-gen9-ipmitool-sdr-elist.txt", "Fan 1")
    assert (fan.kind, fan.reading, fan.unit, fan.state) == ("fan", 19.6, "percent", "Transition to Running")
    assert fan.entity == (29, 1) and fan.number == 0x28
    psu = _one("hpe-proliant-dl360-gen9-ipmitool-sdr-elist.txt", "Power Supply 1")
    assert (psu.kind, psu.reading, psu.state) == ("power", 225.0, "Presence detected")
    presence = _one("hpe-proliant-dl360-gen9-ipmitool-sdr-elist.txt", "Fan 1 Presence")
    assert (presence.kind, presence.reading, presence.state) == ("discrete", None, "Device Present")


def test_duplicate_names_are_kept_apart_by_entity() -> None:
    temps = [s for s in listing("dell-poweredge-r720-ipmitool-sdr-type-temp-fan.txt").sensors if s.name == "Temp"]
    assert [(s.entity, s.number, s.reading) for s in temps] == [((3, 1), 0x0E, 44.0), ((3, 2), 0x0F, 43.0)]


def test_no_reading_spellings() -> None:
    assert _one("asus-esc8000a-e12-ipmitool-sdr-elist.txt", "TR6 Temperature").reading is None
    disabled = _one("asus-esc8000a-e12-ipmitool-sdr-elist.txt", "CPU2 Temperature")
    assert (disabled.kind, disabled.reading, disabled.status) == ("temperature", None, "ns")
    assert _one("asrock-c2750d4i-ipmi-sensors.txt", "FRNT_FAN1").reading is None
    assert _one("supermicro-x8dtu-f-ipmitool-sdr-list.txt", "Fan5").reading is None
    absent = _one("asus-esc8000a-e12-ipmitool-sensor.txt", "CPU2 Temperature")
    assert (absent.kind, absent.reading, absent.thresholds.upper_critical) == ("temperature", None, 93.0)


def test_discrete_sensors_are_not_numbers() -> None:
    cpu = _one("supermicro-x8dtu-f-ipmitool-sensor.txt", "CPU1 Temp")
    assert (cpu.kind, cpu.reading, cpu.state) == ("discrete", None, "0x0")
    redundancy = _one("dell-poweredge-r720-ipmitool-sdr-type-temp-fan.txt", "Fan Redundancy")
    assert (redundancy.kind, redundancy.state) == ("discrete", "Fully Redundant")
    battery = _one("dell-poweredge-unnamed-idrac6-ipmitool-sdr-elist-all-TRUNCATED.txt", "CMOS Battery")
    assert (battery.kind, battery.reading, battery.state) == ("discrete", None, "")


def test_stray_lines_are_skipped_and_reported() -> None:
    text = (
        "Get HPM.x Capabilities request failed, compcode = c1\n"
        "CPU Temp         | 01h | ok  |  3.1 | 77 degrees C\n"
        "Unable to open SDR for reading\n"
        "FAN1             | 41h | ok  | 29.1 | 1300 RPM\n"
        "garbage | with | pipes\n"
        "\n"
    )
    found = parse(text)
    assert found.format == "sdr-elist"
    assert [s.name for s in found.sensors] == ["CPU Temp", "FAN1"]
    assert [(s.line, s.text) for s in found.skipped] == [
        (1, "Get HPM.x Capabilities request failed, compcode = c1"),
        (3, "Unable to open SDR for reading"),
        (5, "garbage | with | pipes"),
    ]


def test_nothing_parseable() -> None:
    found = parse("Error: Unable to establish IPMI v2 / RMCP+ session\n")
    assert found.format is None and found.sensors == () and len(found.skipped) == 1


def test_thresholds_listed_by_magnitude_are_put_in_order() -> None:
    line = "-12V | -11.900 | Volts | ok | -10.400 | -10.600 | -10.800 | -13.200 | -13.400 | -13.600\n"
    rail = parse(line).sensors[0]
    assert rail.thresholds == Thresholds(-13.6, -13.4, -13.2, -10.8, -10.6, -10.4)


def test_a_bad_threshold_cell_skips_the_row() -> None:
    found = parse(
        "Fan1 | 6480.000 | RPM | ok | 405.000 | oops | na | na | na | na\n"
        "Fan2 | 10 | RPM | ok | na | na | na | na | na | na\n"
    )
    assert [s.name for s in found.sensors] == ["Fan2"] and found.skipped[0].line == 1


def test_merge_takes_entities_from_sdr_and_thresholds_from_sensor() -> None:
    merged = merge(
        listing("hpe-proliant-dl360-gen9-ipmitool-sdr-elist.txt"),
        listing("hpe-proliant-dl360-gen9-ipmitool-sensor.txt"),
    )
    assert len(merged) == 71
    cpu = next(s for s in merged if s.name == "02-CPU 1")
    assert cpu.entity == (65, 1) and cpu.thresholds.upper_critical == 70.0 and cpu.reading == 40.0
    megacell = next(s for s in merged if s.name == "Megacell Status")
    assert megacell.kind == "discrete"  # `sensor` says discrete where `sdr elist` only said Disabled
    asus = merge(listing("asus-esc8000a-e12-ipmitool-sdr-elist.txt"), listing("asus-esc8000a-e12-ipmitool-sensor.txt"))
    assert sum(1 for s in asus if s.thresholds.any) == 64
