"""smartctl (smartmontools): whether a disk answers SMART at all, so only such disks get collectd's
smart plugin and the SMART alert rules (a USB bridge or a virtual disk would leave them silent)."""

from __future__ import annotations

import json
from typing import Protocol

from homelab.runtime import process

SMARTCTL = "smartctl"


class SmartReader(Protocol):
    def supports(self, disk: str) -> bool | None:
        """True / False: the disk does / does not answer SMART; None: unknown (no smartctl)."""


def supported(text: str) -> bool | None:
    """`smartctl -i -j`'s answer: SMART available and enabled (`smart_support`), or an NVMe device
    (smartctl 7.3 prints no `smart_support` for NVMe, whose health log needs no enabling). A device
    smartctl cannot open or identify ("Unable to detect device type") has no SMART; an answer that is
    no smartctl JSON at all is unknown."""
    try:
        data = json.loads(text) if text.strip() else None
    except json.JSONDecodeError:
        data = None
    if not isinstance(data, dict) or "smartctl" not in data:
        return None
    support = data.get("smart_support")
    if isinstance(support, dict):
        return bool(support.get("available")) and bool(support.get("enabled"))
    return (data.get("device") or {}).get("protocol") == "NVMe"


class Smartctl:
    def __init__(self, program: str = SMARTCTL) -> None:
        self.program = program

    def supports(self, disk: str) -> bool | None:
        # smartctl's exit status is a bit mask (1: bad command line, 2: device open failed, ...): the
        # JSON says what was found either way
        done = process.run([self.program, "-i", "-j", f"/dev/{disk}"], check=False, timeout=60)
        return None if done.returncode == 127 else supported(done.stdout)
