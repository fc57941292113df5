"""What watches one BMC sensor: its limits (the inventory's, which start as the BMC's, else its class's
default), a rise above or drift from its median of the last day where no absolute limit makes sense,
and the silent rule. The alert rules (render/alerts.py), the dashboards' limit lines and the
inventory's `alerts` lines all read this one decision."""

from __future__ import annotations

from dataclasses import dataclass

from homelab.monitoring import classes
from homelab.monitoring.inventory import BmcEntry, Limits

FAN_FLOOR = "monitoring.thresholds.fan_min_rpm"
UNIT_TEXT = {"temperature": " °C", "fanspeed": " RPM", "percent": " %", "voltage": " V", "power": " W", "current": " A"}
# inventory kind -> the series kind collectd's ipmi plugin gives it (in percent: "percent" whatever the kind)
SERIES_KIND = {"temperature": "temperature", "fan": "fanspeed", "voltage": "voltage", "current": "current",
               "power": "power"}  # fmt: skip
INVENTORY = "inventory"  # the inventory's thresholds: the BMC's as discovered, or the user's
SHOWN = {INVENTORY: "the inventory's limit: the BMC's, or yours"}
PROFILE = "the hardware profile's limit"
SILENT_WINDOW = 300  # seconds without a number that make a sensor silent


@dataclass(frozen=True)
class Watch:
    low: float | None = None
    low_source: str = ""
    high: float | None = None
    high_source: str = ""
    rise: float | None = None  # alert this far above the day's median (the sensor's unit)
    drift: float | None = None  # alert this far off the day's median, either way
    baseline_source: str = ""
    silent: bool = True
    fan_floor: bool = False  # `low` is monitoring.thresholds.fan_min_rpm
    cpu_rule: bool = False  # a CPU temperature without its own limit: the CPU rule's limit watches it
    disk_rule: bool = False  # a disk temperature without its own limit: the disk rule's limit is its own

    def limits(self, drawn: Limits) -> Limits:
        """The limits drawn on dashboards: the inventory's non-critical ones, these critical ones."""
        return drawn.model_copy(update={"lower_critical": self.low, "upper_critical": self.high})

    def lines(self, unit: str) -> list[str]:
        """What alerts on the sensor, in words (the inventory's `alerts`)."""
        found = []
        if self.low is not None or self.fan_floor:
            value = FAN_FLOOR if self.fan_floor else f"{self.low:g}{unit}"
            found.append(f"below {value} ({shown(self.low_source)})")
        if self.high is not None:
            found.append(f"above {self.high:g}{unit} ({shown(self.high_source)})")
        elif self.cpu_rule or self.disk_rule:
            found.append(
                f"above monitoring.thresholds.{'cpu' if self.cpu_rule else 'disk'}_temp_c ({self.high_source})"
            )
        if self.rise is not None:
            found.append(f"{self.rise:g}{unit} above its median of the last day ({shown(self.baseline_source)})")
        if self.drift is not None:
            found.append(f"{self.drift:g}{unit} off its median of the last day ({shown(self.baseline_source)})")
        if self.silent:
            found.append(f"silent: no reading for {SILENT_WINDOW // 60} minutes")
        return found


def shown(source: str) -> str:
    """A limit's source in words, for the inventory's `alerts` and the alerts' summaries."""
    return SHOWN.get(source, source)


def _temperature(entry: BmcEntry, t: Limits, disk_c: float | None) -> Watch:
    cls = entry.sensor_class or classes.classify(entry.name, _entity_id(entry))
    default = classes.TEMPERATURE[cls]
    high, source = t.upper_critical, INVENTORY
    if high is None and entry.defaults and default.upper_critical is not None:
        high, source = default.upper_critical, f"{cls} default: {default.source}"
    if high is None and entry.defaults and cls == "disk":
        high, source = disk_c, default.source
    rise, rise_source = _rise(entry, default.rise if high is None else None, f"{cls} default: {default.source}")
    if cls == "cpu" and high is None:
        source = default.source
    return Watch(
        high=high, high_source=source, rise=rise, baseline_source=rise_source, silent=entry.silent,
        cpu_rule=cls == "cpu", disk_rule=cls == "disk" and entry.defaults,
    )  # fmt: skip


def _rise(entry: BmcEntry, default: float | None, source: str) -> tuple[float | None, str]:
    """The entry's own rise (0: none) over the class default."""
    if entry.rise is not None:
        return (entry.rise or None), INVENTORY
    return (default if entry.defaults else None), source


def _voltage(entry: BmcEntry, t: Limits) -> Watch:
    low, high = t.lower_critical, t.upper_critical
    low_source = high_source = INVENTORY
    nominal = classes.nominal_volts(entry.name)
    drift = None
    if entry.defaults and low is None and high is None:
        if nominal is not None:
            low, high = classes.voltage_band(nominal)
            low_source = high_source = f"ATX12V regulation around {nominal:g} V"
        elif entry.reading:
            drift = round(abs(entry.reading) * classes.DRIFT, 3)
    if entry.rise is not None:
        drift = entry.rise or None
    source = INVENTORY if entry.rise is not None else "10 % of its reading at discovery"
    return Watch(low, low_source, high, high_source, drift=drift, baseline_source=source, silent=entry.silent)


def _power(entry: BmcEntry, t: Limits, percent: bool) -> Watch:
    high, source = t.upper_critical, INVENTORY
    if high is None and percent and entry.defaults:
        high, source = classes.PERCENT_RATED, "the supply's rated output"
    default = round(abs(entry.reading) * classes.POWER_RISE, 1) if entry.reading and high is None else None
    rise, rise_source = _rise(entry, default, "half its reading at discovery")
    return Watch(high=high, high_source=source, rise=rise, baseline_source=rise_source, silent=entry.silent)


def _entity_id(entry: BmcEntry) -> int | None:
    return int(entry.entity.split(".")[0]) if entry.entity else None


def of_entry(entry: BmcEntry, percent: bool, disk_c: float | None = None) -> Watch:
    """The watch of a collected sensor; `percent`: it reads in percent (HPE's fans, a supply's load);
    `disk_c`: the disk rule's limit (monitoring.thresholds.disk_temp_c or the profile's)."""
    t = entry.thresholds
    if entry.kind == "temperature":
        return _temperature(entry, t, disk_c)
    if entry.kind == "voltage":
        return _voltage(entry, t)
    if entry.kind in ("power", "current"):
        return _power(entry, t, percent)
    # fans: the BMC's lower critical, else the configured floor; a duty cycle (HPE) has no floor, but
    # the BMC speeding its fans up far beyond their usual duty means something runs hot or a fan failed
    floor = t.lower_critical is None and not percent and entry.defaults
    duty = classes.DUTY_RISE if percent and t.upper_critical is None else None
    rise, rise_source = _rise(entry, duty, "fans spun up: 30 points above their day median")
    return Watch(
        low=t.lower_critical, low_source=INVENTORY if not floor else FAN_FLOOR, high=t.upper_critical,
        high_source=INVENTORY, rise=rise, baseline_source=rise_source, silent=entry.silent, fan_floor=floor,
    )  # fmt: skip


def of_profile(kind: str, limits: Limits, cpu: bool) -> Watch:
    """The bundled profile's sensors: their limits, silent rules for fans and CPU temperatures."""
    fan = kind == "fanspeed"
    return Watch(
        low=limits.lower_critical if kind in ("fanspeed", "voltage") else None, low_source=PROFILE,
        high=limits.upper_critical if not fan else None, high_source=PROFILE,
        silent=fan or cpu, fan_floor=fan and limits.lower_critical is None,
    )  # fmt: skip


def in_percent(entry: BmcEntry) -> bool:
    return entry.unit.lower() in ("percent", "%")


def describe(entry: BmcEntry) -> list[str]:
    """The inventory's `alerts` lines of a sensor: what alerts on it, and why that limit."""
    from homelab.monitoring.states import words

    if entry.hide:
        return []
    if entry.kind == "discrete":
        if entry.states is None:
            return []
        type_ = entry.sensor_type or "unknown"
        found = [f"any change from its states at discovery ({words(entry.states, type_)}; IPMI type {type_})"]
        return found + ([f"silent: no reading for {SILENT_WINDOW // 60} minutes"] if entry.silent else [])
    if entry.kind not in SERIES_KIND:
        return []
    percent = in_percent(entry)
    return of_entry(entry, percent).lines(UNIT_TEXT["percent" if percent else SERIES_KIND[entry.kind]])
