"""Sensor classes and homelab's default alert limits for BMC sensors whose BMC sets none.

A sensor is put in a class by its IPMI entity id, then its name (what the listings of Supermicro, HPE,
Dell, ASUS and ASRock Rack BMCs call things; tests/monitoring/test_classes.py runs every corpus row).
Each class's default comes from a published figure, cited in docs/monitoring.md ("Default limits"):
a class with no absolute limit that holds across boards (VRM, PSU, GPU, anything unrecognised) is
watched by how far it rises above its own median of the last day instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

SensorClass = Literal["inlet", "cpu", "dimm", "pch", "vrm", "disk", "nvme", "psu", "gpu", "other"]
CLASSES: tuple[SensorClass, ...] = ("inlet", "cpu", "dimm", "pch", "vrm", "disk", "nvme", "psu", "gpu", "other")


@dataclass(frozen=True)
class Default:
    """A temperature class's default: an upper limit (°C) with its source, or a rise above the day's
    median (°C) for classes without one."""

    upper_critical: float | None
    rise: float | None
    source: str


# docs/monitoring.md "Default limits" gives each figure's document; keep the two in step
TEMPERATURE: dict[SensorClass, Default] = {
    "inlet": Default(35, None, "ASHRAE TC 9.9 class A2 allowable inlet range, 10-35 °C"),
    # the CPU rule (monitoring.thresholds.cpu_temp_c, over every CPU sensor) is the CPU class's limit
    "cpu": Default(None, None, "the CPU rule, monitoring.thresholds.cpu_temp_c"),
    "dimm": Default(85, None, "JEDEC DDR3/DDR4 normal operating range, 0-85 °C case"),
    "pch": Default(105, None, "Intel chipset thermal guides, Tcase max 105 °C"),
    # the disk rule's limit (monitoring.thresholds.disk_temp_c, else the profile's), as for SMART's readings
    "disk": Default(None, None, "the disk rule's limit, monitoring.thresholds.disk_temp_c"),
    "nvme": Default(70, None, "NVMe SSD datasheets, operating 0-70 °C"),
    "vrm": Default(None, 20, "no common limit: 20 °C above its day median"),
    "psu": Default(None, 20, "no common limit: 20 °C above its day median"),
    "gpu": Default(None, 20, "no common limit: 20 °C above its day median"),
    "other": Default(None, 20, "no common limit: 20 °C above its day median"),
}
# ATX12V Power Supply Design Guide, Table 2, regulates +12 V, +5 V, +3.3 V and +5 VSB to ±5 %, -12 V
# to ±10 %, at the supply's connector. A BMC's ADC reads a rail a few per cent off that (the corpus'
# ASRock C2750D4I reads its +3VSB at 3.48 V, 5.5 % over, on a normal day): the alert is at ±10 %,
# the band's widest figure, for every rail.
RAIL_TOLERANCE = 0.10
DRIFT = 0.10  # a rail without a nominal voltage: 10 % (ATX's widest tolerance) off its day median
POWER_RISE = 0.5  # power or current without a BMC limit: half its reading at discovery above its day median
DUTY_RISE = 30.0  # a fan duty cycle (percent) this many points above its day median: the BMC fights heat
PERCENT_RATED = 100.0  # a supply's output current in percent of its rating: over 100 % is over its rating

# IPMI 2.0 Table 43-13 entity ids (0x40-0x42 are DCMI's, which HPE uses)
_ENTITIES: dict[int, SensorClass] = {
    3: "cpu", 65: "cpu", 8: "dimm", 32: "dimm", 10: "psu", 20: "vrm", 4: "disk", 55: "inlet", 64: "inlet",
}  # fmt: skip
_NAMES: tuple[tuple[SensorClass, str], ...] = (
    ("psu", r"\bps\s?\d|psu|p/s|power supply|pwr supply|\bpsu?\d"),
    ("vrm", r"\bvrm?\b|vrm|\bvr[ _]?(p?\d|cpu|mem|soc)|_vr|vr_|mosfet|\bvr\d"),
    ("dimm", r"dimm|\bmem|memory|ddr"),
    ("nvme", r"nvme|\bm\.?2\b|\bssd"),
    ("disk", r"\bhdd|\bhd\b|disk|drive|\bsata|backplane|\bbp\d|hd max"),
    ("gpu", r"gpu|\bvga|\bgfx"),
    ("pch", r"pch|chipset|southbridge|\bioh\b|\bich\b"),
    ("inlet", r"inlet|ambient|intake|\bamb\b|room|outside"),
    ("cpu", r"cpu|proc|socket|package|\bcore|\btctl|\bp\d temp"),
)


def classify(name: str, entity_id: int | None = None) -> SensorClass:
    """The class of a temperature sensor: the BMC's entity where it names one, else the sensor's name."""
    lower = name.lower().replace("_", " ")
    for cls, pattern in _NAMES[:3]:  # a supply's, a VR's or a DIMM's name wins over a processor entity
        if re.search(pattern, lower):
            return cls
    if entity_id in _ENTITIES:
        return _ENTITIES[entity_id]
    for cls, pattern in _NAMES[3:]:
        if re.search(pattern, lower):
            return cls
    return "other"


def nominal_volts(name: str) -> float | None:
    """The rail's nominal voltage when its name says it (`+12V`, `12V`, `P3V3`, `3.3VSB`, `-12V`, `5VCC`,
    `P1V05`); None for core, SoC, memory and battery rails, whose voltage the name does not give."""
    lower = name.lower()
    if re.search(r"vcore|vsoc|vddio|vdimm|vbat|vtt|vccin|vpp|vddq|vcc ?io|battery", lower):
        return None
    match = re.search(r"(?<![\d.])([-+]?)(\d{1,2})v(\d{1,2})(?!\d)", lower)  # P3V3, P1V05
    if match:
        return float(f"{match.group(1)}{match.group(2)}.{match.group(3)}")
    match = re.search(r"(?<![\d.])([-+]?)(\d{1,2}(?:\.\d{1,2})?) ?v(?:sb|cc|dc|stby|aux|\b|_|$)", lower)
    if match:
        # ATX has no 3 V rail: `+3V`, `+3VSB` name the 3.3 V ones
        value = 3.3 if match.group(2) == "3" else float(match.group(2))
        return -value if match.group(1) == "-" else value
    return None


def voltage_band(nominal: float) -> tuple[float, float]:
    """The alert band around a rail's nominal voltage: ±10 % (RAIL_TOLERANCE)."""
    low, high = nominal * (1 - RAIL_TOLERANCE), nominal * (1 + RAIL_TOLERANCE)
    return (round(min(low, high), 3), round(max(low, high), 3))


Kind = Literal["temperature", "fanspeed", "voltage", "current", "power", "percent"]
