"""A discrete sensor's state bits in words, by its IPMI sensor type.

`ipmitool sensor` prints a discrete sensor's asserted states as `0xAABB`: AA holds offsets 0-7 (bit 0 =
offset 0), BB offsets 8-14 (bit 7 reserved); homelab keeps that number as is (offset k < 8 is bit 8 + k,
offset k >= 8 is bit k - 8). What an offset means depends on the sensor's event/reading type: the
generic tables of IPMI 2.0 (rev. 1.1) Table 42-2 (presence, redundancy, severity, digital state), or,
for sensor-specific sensors, its sensor type's row of Table 42-3. `ipmitool sensor` does not print the
type, so it is taken from the words ipmitool's `sdr elist` printed for the asserted offset where there
are some, else guessed from the sensor's name and entity; the inventory's `sensor_type` overrides it.
"""

from __future__ import annotations

import re
from typing import Literal

StateType = Literal[
    "power_supply", "power_unit", "processor", "memory", "chassis_intrusion", "watchdog", "drive_slot",
    "entity_presence", "presence", "redundancy", "severity", "digital", "unknown",
]  # fmt: skip

# IPMI 2.0 Table 42-3 (sensor-specific offsets) and Table 42-2 (generic); offset -> words
OFFSETS: dict[StateType, tuple[str, ...]] = {
    # 08h Power Supply
    "power_supply": (
        "presence detected",
        "power supply failure detected",
        "predictive failure",
        "power supply input lost (AC/DC)",
        "power supply input lost or out-of-range",
        "power supply input out-of-range, but present",
        "configuration error",
        "power supply inactive",
    ),
    # 09h Power Unit
    "power_unit": (
        "power off / power down",
        "power cycle",
        "240VA power down",
        "interlock power down",
        "AC lost",
        "soft power control failure",
        "power unit failure detected",
        "predictive failure",
    ),
    # 07h Processor
    "processor": (
        "IERR",
        "thermal trip",
        "FRB1/BIST failure",
        "FRB2/hang in POST failure",
        "FRB3/processor startup failure",
        "configuration error",
        "SM BIOS uncorrectable CPU-complex error",
        "processor presence detected",
        "processor disabled",
        "terminator presence detected",
        "processor automatically throttled",
        "machine check exception (uncorrectable)",
        "correctable machine check error",
    ),
    # 0Ch Memory
    "memory": (
        "correctable ECC",
        "uncorrectable ECC",
        "parity",
        "memory scrub failed",
        "memory device disabled",
        "correctable ECC logging limit reached",
        "presence detected",
        "configuration error",
        "spare",
        "memory automatically throttled",
        "critical overtemperature",
    ),
    # 05h Physical Security (chassis intrusion)
    "chassis_intrusion": (
        "general chassis intrusion",
        "drive bay intrusion",
        "I/O card area intrusion",
        "processor area intrusion",
        "LAN leash lost",
        "unauthorized dock",
        "fan area intrusion",
    ),
    # 23h Watchdog 2
    "watchdog": ("timer expired", "hard reset", "power down", "power cycle", "", "", "", "", "timer interrupt"),
    # 0Dh Drive Slot (Bay)
    "drive_slot": (
        "drive presence",
        "drive fault",
        "predictive failure",
        "hot spare",
        "consistency check / parity check",
        "in critical array",
        "in failed array",
        "rebuild/remap in progress",
        "rebuild/remap aborted",
    ),
    # 25h Entity Presence
    "entity_presence": ("entity present", "entity absent", "entity disabled"),
    # generic 08h: device absent/present
    "presence": ("device absent", "device present"),
    # generic 0Bh: redundancy (a fan block's or a supply pair's)
    "redundancy": (
        "fully redundant",
        "redundancy lost",
        "redundancy degraded",
        "non-redundant: sufficient resources from redundant",
        "non-redundant: sufficient resources from insufficient",
        "non-redundant: insufficient resources",
        "redundancy degraded from fully redundant",
        "redundancy degraded from non-redundant",
    ),
    # generic 07h: severity
    "severity": (
        "transition to OK",
        "transition to non-critical from OK",
        "transition to critical from less severe",
        "transition to non-recoverable from less severe",
        "transition to non-critical from more severe",
        "transition to critical from non-recoverable",
        "transition to non-recoverable",
        "monitor",
        "informational",
    ),
    # generic 03h: digital state
    "digital": ("state deasserted", "state asserted"),
    "unknown": (),
}
RESERVED = 0x0080  # bit 7 of the second byte: no offset


def bit(offset: int) -> int:
    """The bit of `offset` in `ipmitool sensor`'s 0xAABB number."""
    return 1 << (8 + offset) if offset < 8 else 1 << (offset - 8)


def offsets(states: int) -> list[int]:
    return [k for k in range(15) if states & bit(k)]


def words(states: int, type_: StateType) -> str:
    """The asserted offsets in words ("presence detected, power supply input lost (AC/DC)"); an offset
    the type does not name as "offset N"; "no state asserted" for none."""
    table = OFFSETS[type_]
    found = [table[k] if k < len(table) and table[k] else f"offset {k}" for k in offsets(states & ~RESERVED)]
    return ", ".join(found) or "no state asserted"


def changes(states: int, type_: StateType) -> list[tuple[int, str]]:
    """Each state one offset away from `states` (one set or cleared), with its words: what a panel and an
    alert name when a supply fails, a fan is pulled, the chassis is opened."""
    count = max(len(OFFSETS[type_]), max(offsets(states), default=-1) + 1)
    found = []
    for k in range(min(count, 15)):
        other = states ^ bit(k)
        found.append((other, words(other, type_)))
    return found


_NAME_TYPES: tuple[tuple[StateType, str], ...] = (
    ("chassis_intrusion", r"intru|chassis"),
    ("watchdog", r"watchdog|\bwdt"),
    ("power_unit", r"power ?unit|pwr ?unit"),
    ("redundancy", r"redundan|^fans$|fan ?block"),
    ("presence", r"presen"),
    ("memory", r"ecc|dimm|\bmem"),
    ("power_supply", r"\bps ?\d|psu|p/s|power supply"),
    ("drive_slot", r"\bhd ?\d|hdd|drive|disk|backplane|slot"),
    ("processor", r"cpu|proc"),
)
_ENTITY_TYPES: dict[int, StateType] = {10: "power_supply", 3: "processor", 65: "processor", 32: "memory",
                                       8: "memory", 4: "drive_slot", 29: "redundancy"}  # fmt: skip


def guess_type(name: str, entity_id: int | None, states: int | None, text: str = "") -> StateType:
    """The sensor type whose words for the asserted offset are what ipmitool printed (`text`, from `sdr
    elist`), preferring the one the name or entity suggests; else by name, then entity."""
    by_name = next((t for t, pattern in _NAME_TYPES if re.search(pattern, name.lower().replace("_", " "))), None)
    preferred = by_name or _ENTITY_TYPES.get(entity_id or -1)
    said = text.strip().lower()
    if said and states is not None:
        asserted = offsets(states & ~RESERVED)
        fitting = [t for t, table in OFFSETS.items() if any(k < len(table) and table[k].lower() == said
                                                            for k in asserted)]  # fmt: skip
        if fitting:
            return preferred if preferred in fitting else fitting[0]
    return preferred or "unknown"
