"""Per-service resources: the catalog's defaults (compose/*.yaml `resources:`) and the config's per-app
overrides (`apps.<app>.resources`) share this one model, so both are validated alike (units, bounds,
reservation within the limit). docs/resources.md says where each default comes from."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator

from homelab.errors import ConfigError

_SIZE = re.compile(r"^(\d+)([kmg])$")
_MIN_MEMORY = 6 << 20  # the engine refuses a memory limit under 6 MiB
_MAX_MEMORY = 1 << 40


def size_bytes(size: str) -> int:
    """'512m' -> 536870912 (k, m, g: powers of 1024, as the engine reads them)."""
    match = _SIZE.match(size)
    if not match:
        raise ValueError(f"{size!r} is not a size: a whole number and k, m or g, e.g. 512m or 4g")
    return int(match.group(1)) << (10 * (1 + "kmg".index(match.group(2))))


def _memory(value: str) -> str:
    value = value.strip().lower()
    if not _MIN_MEMORY <= size_bytes(value) <= _MAX_MEMORY:
        raise ValueError(f"{value!r} is out of range: between 6m and 1024g")
    return value


Memory = Annotated[str, AfterValidator(_memory)]


class Resources(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    memory: Memory | None = Field(
        None, description="Memory limit, e.g. 4g: past it the kernel OOM-kills the container (then restarted)."
    )
    reservation: Memory | None = Field(None, description="Memory the service is counted as needing (<= memory).")
    pids: int | None = Field(None, ge=16, le=65536, description="Most processes/threads (stops a fork bomb).")
    cpus: float | None = Field(None, gt=0, le=256, description="CPU cap in cores, e.g. 2; none by default.")
    cpu_weight: int | None = Field(
        None, ge=2, le=262144, description="Relative CPU share under contention (1024 = normal)."
    )

    @model_validator(mode="after")
    def _reservation_within_limit(self) -> Resources:
        if self.memory and self.reservation and size_bytes(self.reservation) > size_bytes(self.memory):
            raise ValueError(f"reservation {self.reservation} exceeds memory {self.memory}")
        return self

    def overridden_by(self, override: Resources | None, where: str) -> Resources:
        """These defaults with every field the override sets replaced. A lower memory limit alone also
        lowers the default reservation to it; a reservation above the default limit is a config error."""
        if override is None:
            return self
        merged = {**self.model_dump(), **override.model_dump(exclude_none=True)}
        if override.memory and not override.reservation and self.reservation:
            merged["reservation"] = min(self.reservation, override.memory, key=size_bytes)
        try:
            return Resources.model_validate(merged)
        except ValidationError as exc:
            message = exc.errors()[0]["msg"].removeprefix("Value error, ")
            raise ConfigError([f"{where}: {message} (with the catalog's defaults)"]) from None
