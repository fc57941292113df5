"""Parse what real BMCs print: `ipmitool sdr elist [full|all]`, `ipmitool sdr [list]`, `ipmitool sensor`
and FreeIPMI's `ipmi-sensors`, into typed sensors.

Written against published listings of Supermicro, HPE, Dell, ASUS and ASRock Rack BMCs
(tests/monitoring/test_listing.py runs it over each). What they print that a naive parser trips on:
- no reading: `na`, `N/A`, `No Reading`, `no reading`, `Disabled`, or nothing at all;
- discrete sensors: a state text (`Fully Redundant`, `Presence detected`), a hex state (`0x0280`) or an
  empty reading; analog rows may append a state too (`19.60 percent, Transition to Running`);
- fans in percent (HPE iLO), several sensors with the same name (Dell's two CPU `Temp`s, told apart by
  entity 3.1 / 3.2), negative readings and thresholds (-12V), fractional values;
- thresholds that are one-sided (upper only, lower only) or listed by magnitude on a negative rail
  (lower above upper): those are put back in order;
- lines that are not sensors (stderr of ipmitool mixed in, `#` comments, FreeIPMI's header): skipped
  and reported, never guessed at.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Literal

Kind = Literal["temperature", "fan", "voltage", "current", "power", "discrete", "other"]
Format = Literal["sdr-elist", "sdr-list", "sensor", "ipmi-sensors"]

NO_READING = {"", "na", "n/a", "no reading", "disabled", "not readable", "unavailable"}
UNIT_KINDS: dict[str, Kind] = {
    "degrees c": "temperature",
    "c": "temperature",
    "degrees f": "temperature",
    "f": "temperature",
    "rpm": "fan",
    "volts": "voltage",
    "v": "voltage",
    "amps": "current",
    "a": "current",
    "watts": "power",
    "w": "power",
    "discrete": "discrete",
}
# FreeIPMI's Type column
TYPE_KINDS: dict[str, Kind] = {
    "temperature": "temperature",
    "fan": "fan",
    "voltage": "voltage",
    "current": "current",
}
FAN_ENTITY = 29  # IPMI entity id of a fan / cooling device
_NUMBER = re.compile(r"^[-+]?(\d+(\.\d*)?|\.\d+)$")
_ELIST_NUMBER = re.compile(r"^[0-9A-Fa-f]{2}h$")
_ENTITY = re.compile(r"^(\d+)\.(\d+)$")
_READING = re.compile(r"^([-+]?(?:\d+(?:\.\d*)?|\.\d+))\s+([^,]+?)\s*(?:,\s*(.*))?$")


@dataclass(frozen=True)
class Thresholds:
    """The six IPMI thresholds; None where the BMC has none."""

    lower_non_recoverable: float | None = None
    lower_critical: float | None = None
    lower_non_critical: float | None = None
    upper_non_critical: float | None = None
    upper_critical: float | None = None
    upper_non_recoverable: float | None = None

    @property
    def any(self) -> bool:
        return any(v is not None for v in self.values())

    def values(self) -> tuple[float | None, ...]:
        return (
            self.lower_non_recoverable,
            self.lower_critical,
            self.lower_non_critical,
            self.upper_non_critical,
            self.upper_critical,
            self.upper_non_recoverable,
        )

    def in_order(self) -> Thresholds:
        """Some BMCs list a negative rail's thresholds by magnitude (its lower ones above its upper
        ones): mirror them so lower < upper, which is what the alert rules compare with."""
        lows = [v for v in self.values()[:3] if v is not None]
        highs = [v for v in self.values()[3:] if v is not None]
        if not lows or not highs or max(lows) <= min(highs):
            return self
        lnr, lcr, lnc, unc, ucr, unr = self.values()
        return Thresholds(unr, ucr, unc, lnc, lcr, lnr)


@dataclass(frozen=True)
class Sensor:
    """One row of a BMC listing."""

    name: str
    kind: Kind
    reading: float | None  # None: no reading (absent, disabled, discrete)
    unit: str  # as the BMC prints it ("degrees C", "RPM", "percent"...), "" when unknown
    status: str  # ok, ns, nc, cr, nr, na, or a discrete state word
    entity: tuple[int, int] | None = None  # (entity id, instance) from `sdr elist`
    number: int | None = None  # sensor number from `sdr elist`
    state: str = ""  # discrete state text ("Fully Redundant", "0x0280")
    thresholds: Thresholds = field(default_factory=Thresholds)
    # a discrete sensor's asserted states as `ipmitool sensor` prints them in its status column
    # ("0x0280": offsets 0-7, then 8-14), what the BMC's state panel compares with
    states: int | None = None

    @property
    def entity_text(self) -> str:
        return f"{self.entity[0]}.{self.entity[1]}" if self.entity else ""


@dataclass(frozen=True)
class Skipped:
    line: int
    text: str
    why: str


@dataclass(frozen=True)
class Listing:
    format: Format | None
    sensors: tuple[Sensor, ...]
    skipped: tuple[Skipped, ...]

    def by_kind(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for s in self.sensors:
            counts[s.kind] = counts.get(s.kind, 0) + 1
        return counts


def _number(text: str) -> float | None:
    text = text.strip()
    return float(text) if _NUMBER.match(text) else None


def kind_from_name(name: str, entity_id: int | None = None) -> Kind | None:
    """A guess for rows that carry no unit (absent or disabled sensors)."""
    lower = name.lower()
    if "temp" in lower or "ambient" in lower or lower.endswith(" zone"):
        return "temperature"
    if entity_id == FAN_ENTITY or re.search(r"\bfan", lower):
        return "fan"
    if re.search(r"(^[-+]?\d+(\.\d+)?v)|vcore|vbat|vcc|vdd|vsoc|vtt", lower):
        return "voltage"
    return None


def _kind_for(unit: str, name: str, entity_id: int | None) -> Kind:
    unit = unit.strip().lower()
    if unit in UNIT_KINDS:
        return UNIT_KINDS[unit]
    if unit in ("percent", "%"):
        # HPE reports fan duty cycles in percent, Supermicro's PMBus supplies their output current
        # (`PS1 Curr Out %`) and load; anything else in percent stays "other"
        if kind_from_name(name, entity_id) == "fan":
            return "fan"
        return "current" if re.search(r"curr|load|\bout", name.lower()) else "other"
    if unit:
        return "other"
    return kind_from_name(name, entity_id) or "discrete"


def _reading(text: str, name: str, entity_id: int | None) -> tuple[float | None, str, Kind | None, str]:
    """(reading, unit, kind or None, state) from a `sdr` reading column."""
    text = text.strip()
    if text.lower() in NO_READING:
        return None, "", kind_from_name(name, entity_id), ""
    match = _READING.match(text)
    if match:
        unit = match.group(2).strip()
        return float(match.group(1)), unit, _kind_for(unit, name, entity_id), (match.group(3) or "").strip()
    return None, "", "discrete", text


def _split(line: str) -> list[str]:
    return [c.strip() for c in line.split("|")]


def _parse_elist(cells: list[str]) -> Sensor | None:
    if len(cells) != 5 or not _ELIST_NUMBER.match(cells[1]):
        return None
    entity = _ENTITY.match(cells[3])
    if not entity:
        return None
    ids = (int(entity.group(1)), int(entity.group(2)))
    reading, unit, kind, state = _reading(cells[4], cells[0], ids[0])
    if kind is None:
        kind = "discrete" if cells[2] == "ok" else "other"
    return Sensor(cells[0], kind, reading, unit, cells[2], ids, int(cells[1][:2], 16), state)


def _parse_sdr_list(cells: list[str]) -> Sensor | None:
    if len(cells) != 3:
        return None
    reading, unit, kind, state = _reading(cells[1], cells[0], None)
    return Sensor(cells[0], kind or "other", reading, unit, cells[2], state=state)


def _parse_sensor(cells: list[str]) -> Sensor | None:
    if len(cells) != 10:
        return None
    value, unit, status = cells[1], cells[2], cells[3]
    bounds = [_number(c) for c in cells[4:]]
    if any(b is None and c.lower() != "na" for b, c in zip(bounds, cells[4:], strict=True)):
        return None
    reading = _number(value)
    state = value if value.lower().startswith("0x") else ""
    kind: Kind = "discrete" if state else _kind_for(unit, cells[0], None)
    if value.lower() in NO_READING and not unit:
        kind = kind_from_name(cells[0]) or "other"
    states = int(status, 16) if kind == "discrete" and re.fullmatch(r"0x[0-9A-Fa-f]{1,4}", status) else None
    thresholds = Thresholds(*bounds).in_order()
    return Sensor(cells[0], kind, reading, unit, status, state=state, thresholds=thresholds, states=states)


def _parse_freeipmi(cells: list[str]) -> Sensor | None:
    if len(cells) != 6 or not cells[0].isdigit():
        return None
    name, type_, value, unit, event = cells[1], cells[2], cells[3], cells[4], cells[5]
    kind: Kind = TYPE_KINDS.get(type_.lower()) or _kind_for(unit, name, None)
    reading = _number(value)
    if reading is None and value.lower() not in NO_READING:
        kind = "discrete"
    return Sensor(name, kind, reading, unit, event.strip("'"), number=int(cells[0]))


PARSERS: dict[Format, Callable[[list[str]], Sensor | None]] = {
    "sdr-elist": _parse_elist,
    "sensor": _parse_sensor,
    "ipmi-sensors": _parse_freeipmi,
    "sdr-list": _parse_sdr_list,
}


def _detect(rows: list[tuple[int, str]]) -> Format | None:
    """The format most lines parse as (a stray stderr line must not decide it)."""
    scores: dict[Format, int] = {}
    for _, line in rows:
        cells = _split(line)
        for name, parser in PARSERS.items():
            if parser(cells) is not None:
                scores[name] = scores.get(name, 0) + 1
                break
    if not scores:
        return None
    return max(scores, key=scores.__getitem__)


def parse(text: str) -> Listing:
    """Every sensor row of a listing; lines that are no sensor row of its format are skipped, with why."""
    rows: list[tuple[int, str]] = []
    skipped: list[Skipped] = []
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if "|" not in stripped:
            skipped.append(Skipped(number, stripped, "not a sensor row (no '|')"))
            continue
        rows.append((number, stripped))
    fmt = _detect(rows)
    sensors: list[Sensor] = []
    for number, line in rows:
        sensor = PARSERS[fmt](_split(line)) if fmt else None
        if sensor is None or not sensor.name:
            skipped.append(Skipped(number, line, f"not a row of `{fmt}`" if fmt else "no known listing format"))
        else:
            sensors.append(sensor)
    return Listing(fmt, tuple(sensors), tuple(sorted(skipped, key=lambda s: s.line)))


def merge(sdr: Listing, sensor: Listing) -> tuple[Sensor, ...]:
    """`sdr elist` (entity ids, sensor numbers) joined with `ipmitool sensor` (units, thresholds): rows
    are matched by name and, for names used several times, by their order in both listings. Rows only
    `ipmitool sensor` lists follow (`sdr elist full` leaves out compact records, where most BMCs keep
    their discrete sensors)."""
    pending: dict[str, list[Sensor]] = {}
    for row in sensor.sensors:
        pending.setdefault(row.name, []).append(row)
    merged = []
    for row in sdr.sensors:
        candidates = pending.get(row.name)
        if not candidates:
            merged.append(row)
            continue
        other = candidates.pop(0)
        # a row without a reading only has a kind by its name: the other listing's unit knows better; a
        # sensor `ipmitool sensor` lists as discrete with states is one even where `sdr elist` shows a
        # reading beside its state ("225 Watts, Presence detected"): collectd's ipmi plugin skips it,
        # its states are what is watched
        kind = row.kind if row.reading is not None or other.kind == "other" else other.kind
        if other.kind == "discrete" and other.states is not None:
            kind = "discrete"
        reading = row.reading if row.reading is not None else other.reading
        merged.append(
            replace(
                row, kind=kind, unit=row.unit or other.unit, reading=reading, thresholds=other.thresholds,
                states=other.states,
            )
        )  # fmt: skip
    return (*merged, *(row for rows in pending.values() for row in rows))
