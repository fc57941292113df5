"""`homelab monitor discover` and `check` (a verb: it reaches ipmitool, the host, smartctl and ZFS
through homelab/runtime/): read what the box has (BMC, lm-sensors, disks and their SMART support,
network cards, ZFS pools) into an inventory, and compare a written inventory with what the box
reports now."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import yaml

from homelab.config.loaded import LoadedConfig
from homelab.errors import CommandFailed, ConfigError, EnvironmentProblem
from homelab.monitoring import inventory as inv
from homelab.monitoring.listing import Sensor, merge, parse
from homelab.monitoring.watch import describe
from homelab.runtime.hwmon import HostReader
from homelab.runtime.ipmi import BmcReader
from homelab.runtime.smart import SmartReader
from homelab.runtime.zfs import Zfs

# lm-sensors feature prefix -> collectd sensors plugin type
HWMON_TYPES: dict[str, Literal["temperature", "fanspeed", "voltage"]] = {
    "temp": "temperature",
    "fan": "fanspeed",
    "in": "voltage",
}


# what rediscovery keeps of a sensor the user may have changed
KEPT = ("key", "label", "hide", "thresholds", "defaults", "rise", "silent", "sensor_class", "sensor_type")


@dataclass(frozen=True)
class Found:
    inventory: inv.Inventory
    skipped: tuple[str, ...]  # listing lines that were no sensor (ipmitool's warnings, ...)


def read_bmc(bmc: BmcReader) -> tuple[tuple[Sensor, ...], tuple[str, ...]]:
    sdr, sensor = parse(bmc.sdr()), parse(bmc.sensors())
    skipped = tuple(f"{name} line {s.line}: {s.text}" for name, lst in (("sdr", sdr), ("sensor", sensor))
                    for s in lst.skipped)  # fmt: skip
    return merge(sdr, sensor) if sdr.sensors else sensor.sensors, skipped


def hwmon_entries(text: str) -> list[inv.HwmonEntry]:
    """lm-sensors' JSON: {chip: {"Adapter": ..., feature label: {"temp1_input": 42.0, ...}}}."""
    try:
        chips = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError:
        return []
    entries = []
    for chip, features in chips.items():
        if not isinstance(features, dict):
            continue
        for label, values in features.items():
            if not isinstance(values, dict):
                continue
            for key in values:
                match = re.fullmatch(r"(temp|fan|in)(\d+)_input", key)
                if match:
                    feature, kind = f"{match.group(1)}{match.group(2)}", HWMON_TYPES[match.group(1)]
                    entries.append(inv.HwmonEntry(chip=chip, feature=feature, type=kind, label=label))
    return entries


def disk_names(text: str) -> list[str]:
    try:
        devices = json.loads(text).get("blockdevices", []) if text.strip() else []
    except (json.JSONDecodeError, AttributeError):
        return []
    return sorted(d["name"] for d in devices if d.get("type") == "disk" and d.get("tran") in ("sata", "sas", "nvme"))


def pool_names(zfs: Zfs | None) -> list[str] | None:
    """The imported pools; None when ZFS is not installed or does not answer."""
    if zfs is None or not zfs.available():
        return None
    try:
        return sorted(p.name for p in zfs.pools())
    except CommandFailed:
        return None


def discover(
    bmc: BmcReader | None,
    host: HostReader | None,
    previous: inv.Inventory | None = None,
    *,
    smart: SmartReader | None = None,
    zfs: Zfs | None = None,
) -> Found:
    sensors, skipped = read_bmc(bmc) if bmc else ((), ())
    found = inv.from_sensors(sensors)
    hwmon = hwmon_entries(host.sensors_json()) if host else []
    disks = disk_names(host.disks_json()) if host else []
    nics = host.nics() if host else []
    # a disk smartctl cannot tell about (no smartctl) keeps its SMART series: better a silent rule
    # than a failing disk nobody watches
    no_smart = [d for d in disks if smart is not None and smart.supports(d) is False]
    fresh = found.model_copy(
        update={"hwmon": hwmon, "disks": disks, "no_smart": no_smart, "nics": nics, "pools": pool_names(zfs) or []}
    )
    return Found(keep_edits(fresh, previous) if previous else fresh, skipped)


def keep_edits(fresh: inv.Inventory, previous: inv.Inventory) -> inv.Inventory:
    """Rediscovery keeps what the user changed: a sensor with the same name and entity keeps its key,
    label, hide, thresholds, alert switches and IPMI sensor type."""
    old = {(e.name, e.entity): e for e in previous.bmc}
    kept = []
    for entry in fresh.bmc:
        before = old.get((entry.name, entry.entity))
        if before:
            entry = entry.model_copy(update={k: getattr(before, k) for k in KEPT})
        kept.append(entry)
    return fresh.model_copy(update={"bmc": kept})


@dataclass(frozen=True)
class Drift:
    missing: tuple[str, ...]  # in the inventory (collected), not reported by the BMC now
    new: tuple[str, ...]  # reported with a reading now, not in the inventory

    @property
    def clean(self) -> bool:
        return not self.missing and not self.new


def check(bmc: BmcReader, inventory: inv.Inventory, zfs: Zfs | None = None) -> Drift:
    """The BMC's sensors (and, given `zfs`, the imported pools) now against the inventory."""
    sensors, _ = read_bmc(bmc)
    now = {(s.name, s.entity_text or None) for s in sensors if s.reading is not None or s.states is not None}
    known = {(e.name, e.entity) for e in inventory.bmc}
    watched = inventory.collected() + inventory.discrete()
    missing = [e.name for e in watched if (e.name, e.entity) not in now]
    new = [name for name, entity in sorted(now - known, key=str)]
    pools = pool_names(zfs)
    if pools is not None:
        missing += [f"pool {p}" for p in inventory.pools if p not in pools]
        new += [f"pool {p}" for p in pools if p not in inventory.pools]
    return Drift(tuple(missing), tuple(new))


def inventory_path(loaded: LoadedConfig) -> Path:
    """Where the inventory lives: `monitoring.inventory`, relative to homelab.yaml."""
    relative = loaded.config.monitoring.inventory
    if not relative:
        raise ConfigError(
            [f"{loaded.path}: monitoring.inventory: not set (add e.g. `inventory: monitoring-inventory.yaml`)"]
        )
    return loaded.base_dir / relative


def bmc_reader(loaded: LoadedConfig) -> BmcReader | None:
    """ipmitool with the BMC settings collectd gets: none when ipmi is off."""
    from homelab.runtime.ipmi import Ipmitool
    from homelab.secrets import user_secret_values

    ipmi = loaded.config.monitoring.ipmi
    if ipmi.mode == "off":
        return None
    if ipmi.mode == "local":
        return Ipmitool()
    password = user_secret_values(loaded).get(ipmi.password_file or "", "")
    return Ipmitool(ipmi.address, ipmi.username, password, cipher_suite=ipmi.cipher_suite)


def discover_into(
    loaded: LoadedConfig,
    bmc: BmcReader | None,
    host: HostReader | None,
    *,
    smart: SmartReader | None = None,
    zfs: Zfs | None = None,
) -> tuple[Path, Found]:
    """Discover and write the inventory file (keeping the user's edits of an existing one)."""
    path = inventory_path(loaded)
    previous = inv.load(path) if path.is_symlink() or path.exists() else None  # a loop is reported
    found = discover(bmc, host, previous, smart=smart, zfs=zfs)
    if not found.inventory.bmc and bmc is not None:
        raise EnvironmentProblem(
            f"the BMC listed no sensor; nothing written to {path}: " + "; ".join(found.skipped[:3])
        )
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(dump(found.inventory), encoding="utf-8")
    tmp.replace(path)
    return path, found


def drift_report(bmc: BmcReader, inventory: inv.Inventory) -> list[tuple[Literal["ok", "warn", "fail"], str]]:
    """`homelab doctor`'s lines about the sensors: (level, detail), level ok, warn or fail."""
    try:
        drift = check(bmc, inventory)
    except EnvironmentProblem as exc:
        return [("warn", f"cannot read the BMC to compare with the inventory: {exc}")]
    if drift.clean:
        return [("ok", f"the BMC reports every one of the inventory's {len(inventory.collected())} sensors")]
    gone = "in the inventory, no reading from the BMC now (its rules alert)"
    lines: list[tuple[Literal["ok", "warn", "fail"], str]] = [("fail", f"{name}: {gone}") for name in drift.missing]
    lines += [
        ("warn", f"{name}: new on the BMC, not in the inventory (homelab monitor discover)") for name in drift.new
    ]
    return lines


def dump(inventory: inv.Inventory) -> str:
    """The inventory as YAML, each sensor with the alert rules that watch it in words (`alerts`)."""
    data = inventory.model_dump(mode="json", exclude_defaults=False)
    for entry, model in zip(data["bmc"], inventory.bmc, strict=True):
        entry["thresholds"] = {k: v for k, v in entry["thresholds"].items() if v is not None}
        entry["alerts"] = describe(model)
    return inv.HEADER + yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=120)
