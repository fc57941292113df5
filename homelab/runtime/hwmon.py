"""The host's own sensors, disks and network cards: `sensors -j` (lm-sensors), `lsblk -J`, /sys/class/net."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from homelab.runtime import process


class HostReader(Protocol):
    def sensors_json(self) -> str:
        """`sensors -j`; "" when lm-sensors is missing or finds no chip."""

    def disks_json(self) -> str:
        """`lsblk -J -d -o NAME,TYPE,TRAN`; "" when lsblk fails."""

    def nics(self) -> list[str]:
        """Network interfaces backed by a device (not lo, bridges, veths, tunnels)."""


class Host:
    def _output(self, argv: list[str]) -> str:
        done = process.run(argv, check=False, timeout=60)
        return done.stdout if done.returncode == 0 else ""

    def sensors_json(self) -> str:
        return self._output(["sensors", "-j"])

    def disks_json(self) -> str:
        return self._output(["lsblk", "-J", "-d", "-o", "NAME,TYPE,TRAN"])

    def nics(self, root: Path = Path("/sys/class/net")) -> list[str]:
        return sorted(p.name for p in root.iterdir() if (p / "device").exists()) if root.is_dir() else []
