"""One preflight finding: ok, warn or fail, and why. Every producer of checks (the doctor, the certificate
preflight, the swarm's node checks) builds these, so it imports nothing of homelab."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Level = Literal["ok", "warn", "fail"]


@dataclass(frozen=True)
class Check:
    level: Level
    name: str
    detail: str
