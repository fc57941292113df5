"""Hardware profiles: what the board's BMC reports, which disks exist, how the pool is laid out."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict

from homelab.errors import ConfigError


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BmcSensor(_Model):
    name: str
    type: Literal["temperature", "fanspeed", "voltage", "power", "current"]
    entity: str
    warn: float | None = None
    crit: float | None = None
    min: float | None = None
    max: float | None = None


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


def available() -> list[str]:
    return sorted(p.stem for p in Path(__file__).parent.glob("*.yaml"))


@functools.cache
def load_profile(name: str) -> Profile:
    path = Path(__file__).parent / f"{name}.yaml"
    if not path.is_file():
        raise ConfigError([f"server.profile: unknown hardware profile {name!r} (known: {', '.join(available())})"])
    return Profile.model_validate(yaml.safe_load(path.read_text(encoding="utf-8")))
