"""A smartctl behind homelab.runtime.smart.SmartReader that records every disk it is asked about and
answers with smartctl 7.3's JSON (`smartctl -i -j /dev/<disk>`): tests/monitoring/test_smart.py checks
the negative answer against the real smartctl, the positive ones follow smartmontools' JSON format
(`smart_support.available/enabled`; NVMe devices carry `device.protocol: NVMe` and no `smart_support`)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Literal

from homelab.runtime.smart import supported

Answer = Literal["ata", "nvme", "disabled", "unknown-device", "missing"]


def answer(disk: str, kind: Answer) -> str:
    """What smartctl 7.3 prints for such a disk ("" when smartctl is not installed)."""
    if kind == "missing":
        return ""
    head = {"json_format_version": [1, 0], "smartctl": {"version": [7, 3], "exit_status": 0}}
    if kind == "unknown-device":
        messages = [{"string": f"/dev/{disk}: Unable to detect device type", "severity": "error"}]
        return json.dumps({**head, "smartctl": {"version": [7, 3], "messages": messages, "exit_status": 1}})
    if kind == "nvme":
        return json.dumps({**head, "device": {"name": f"/dev/{disk}", "type": "nvme", "protocol": "NVMe"}})
    device = {"name": f"/dev/{disk}", "info_name": f"/dev/{disk} [SAT]", "type": "sat", "protocol": "ATA"}
    support = {"available": True, "enabled": kind == "ata"}
    return json.dumps({**head, "device": device, "smart_support": support})


@dataclass
class FakeSmartctl:
    disks: dict[str, Answer]
    calls: list[str] = field(default_factory=list)

    def supports(self, disk: str) -> bool | None:
        self.calls.append(disk)
        return supported(answer(disk, self.disks.get(disk, "unknown-device")))
