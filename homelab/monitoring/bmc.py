"""The BMC sensors collectd reads, from the inventory or (without one) the hardware profile: their
collectd type and type instance, human label, role, and the limits their alert rules use."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from homelab.monitoring import watch
from homelab.monitoring.inventory import BmcEntry, Inventory, Limits
from homelab.monitoring.watch import SERIES_KIND, Watch, in_percent
from homelab.profiles import BmcSensor, Profile

# characters a rename rule may name literally (anything else matches as "any character")
_PLAIN = re.compile(r"[A-Za-z0-9 _,:;@%&=#'~<>-]")


Kind = Literal["temperature", "fanspeed", "voltage", "current", "power", "percent"]


@dataclass(frozen=True)
class BmcSeries:
    type_instance: str
    type: str
    kind: Kind
    label: str
    cpu: bool
    limits: Limits  # drawn on the dashboards: the watch's critical limits, the inventory's others
    watch: Watch
    fahrenheit: bool = False


@dataclass(frozen=True)
class Rename:
    """collectd.conf rule: a sensor whose composed name matches `pattern` gets type instance `key`."""

    pattern: str
    key: str


def _profile_limits(sensor: BmcSensor) -> Limits:
    if sensor.type == "temperature":
        return Limits(upper_non_critical=sensor.warn, upper_critical=sensor.crit)
    return Limits(lower_critical=sensor.min, upper_critical=sensor.max)


def from_profile(profile: Profile) -> list[BmcSeries]:
    found = []
    for s in profile.bmc.sensors:
        cpu, limits = s.type == "temperature" and s.entity == "processor", _profile_limits(s)
        found.append(
            BmcSeries(s.collectd_name, s.type, s.type, s.name, cpu, limits, watch.of_profile(s.type, limits, cpu))
        )
    return found


def from_inventory(inventory: Inventory, disk_c: float | None = None) -> list[BmcSeries]:
    """The inventory's collected sensors; `disk_c`: the disk rule's limit, for disk temperatures."""
    found = []
    for e in inventory.collected():
        percent = in_percent(e)
        type_ = "percent" if percent else SERIES_KIND[e.kind]
        watched = watch.of_entry(e, percent, disk_c)
        kind: Kind = "percent" if percent else SERIES_KIND[e.kind]  # type: ignore[assignment]
        limits = watched.limits(e.thresholds)
        found.append(BmcSeries(e.key, type_, kind, e.shown, e.cpu, limits, watched, e.fahrenheit))
    return found


def _literal(text: str) -> str:
    """A POSIX extended regex matching `text`, written without backslashes (collectd.conf strings
    unescape them): special characters as bracket expressions, unusual ones as '.'."""
    out = []
    for c in text:
        if _PLAIN.match(c):
            out.append(c)
        elif c in ".+*?(){}|$":
            out.append(f"[{c}]")
        else:
            out.append(".")
    return "".join(out)


def rename_rules(inventory: Inventory) -> list[Rename]:
    """collectd names a sensor "<name> <entity name> (<id>.<instance>)". A rule per collected sensor
    maps that to its key: by name alone, or by name and entity where a name repeats. Longer names
    first: once renamed, a key (no parentheses) matches no later rule."""
    entries = inventory.collected()
    names = [e.name for e in inventory.bmc]

    def pattern(e: BmcEntry) -> str:
        entity = _literal(e.entity) if e.entity and names.count(e.name) > 1 else "[^()]*"
        prefix = "percent-" if in_percent(e) else ""
        return f"^{prefix}{_literal(e.name)} [^()]*[(]{entity}[)]$"

    ordered = sorted(entries, key=lambda e: (-len(e.name), e.entity is None))
    return [Rename(pattern(e), e.key) for e in ordered]
