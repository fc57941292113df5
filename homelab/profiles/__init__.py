"""Hardware profiles: what the board's BMC reports, which disks exist, how the pool is laid out."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from homelab.errors import ConfigError
from homelab.yamlio import safe_load


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# IPMI entity ID codes (IPMI 2.0 table 43-13) under the names OpenIPMI prints for them (its
# entity_id_types table, lib/entity.c; the strings are in Debian's libOpenIPMI.so.0 in that order):
# 4 is "disk", 8 "memory_module", 32 "memory_device" (the DIMM temperatures of most boards).
ENTITY_IDS = {
    "processor": 3,
    "disk": 4,
    "system_board": 7,
    "memory_module": 8,
    "power_supply": 10,
    "system_chassis": 23,
    "fan_cooling": 29,
    "memory_device": 32,
}


class BmcSensor(_Model):
    name: str
    type: Literal["temperature", "fanspeed", "voltage", "power", "current"]
    entity: str
    # Entity id and instance: OpenIPMI names a sensor "<name> <entity> (<entity id>.<instance>)".
    entity_id: int | None = None  # None: ENTITY_IDS[entity]
    entity_instance: int = 1
    warn: float | None = None
    crit: float | None = None
    min: float | None = None
    max: float | None = None

    @property
    def ipmi_entity_id(self) -> int:
        return self.entity_id if self.entity_id is not None else ENTITY_IDS[self.entity]

    @property
    def collectd_name(self) -> str:
        """The type_instance collectd's ipmi plugin composes for this sensor."""
        return f"{self.name} {self.entity} ({self.ipmi_entity_id}.{self.entity_instance})"


class LmSensor(_Model):
    """One lm-sensors feature read by collectd's sensors plugin: `sensors-<chip>.<type>-<feature>`."""

    chip: str
    type: Literal["temperature", "fanspeed", "voltage"] = "temperature"
    feature: str
    label: str


class Bmc(_Model):
    chip: str
    sensors: list[BmcSensor]


class Pool(_Model):
    name: str
    layout: str
    vdevs: list[str]


class Thresholds(_Model):
    cpu_temp_c: float
    disk_temp_c: float


class Profile(_Model):
    name: str
    board: str
    cpu: str
    memory_gb: int
    ecc: bool
    bmc: Bmc
    disks: list[str]
    pool: Pool
    thresholds: Thresholds
    network_interface: str
    lm_sensors: list[LmSensor] = []
    thermal_zones: list[str] = []


def available() -> list[str]:
    return sorted(p.stem for p in Path(__file__).parent.glob("*.yaml"))


@functools.cache
def load_profile(name: str) -> Profile:
    path = Path(__file__).parent / f"{name}.yaml"
    if not path.is_file():
        raise ConfigError([f"server.profile: unknown hardware profile {name!r} (known: {', '.join(available())})"])
    return Profile.model_validate(safe_load(path.read_text(encoding="utf-8")))
