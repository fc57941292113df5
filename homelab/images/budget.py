"""The box's RAM budget: every service's reservation and limit against the machine's memory, with room
kept for the OS, and what is left for the ZFS ARC. Pure arithmetic on the Plan (no I/O): the caller says
how much RAM the box has (the hardware profile's, or the host's when planning for this machine).
docs/resources.md walks through the example's numbers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from homelab.config.resources import size_bytes

if TYPE_CHECKING:  # plan.py refuses an over-budget config through this module
    from homelab.config.loaded import LoadedConfig
    from homelab.plan_model import Plan

MIB = 1 << 20
GIB = 1 << 30
OS_HEADROOM = 1 * GIB  # kernel, sshd, docker, the homelab CLI itself
OVERCOMMIT_FACTOR = 1.5  # limits may add up to this much of the RAM left for apps before a warning


@dataclass(frozen=True)
class Line:
    service: str  # stack/service
    reservation: int
    limit: int


@dataclass(frozen=True)
class Budget:
    ram: int
    lines: tuple[Line, ...]
    ram_source: str = "profile"  # "profile" (memory_gb) or "host" (this machine's MemTotal)
    ram_why: str = ""  # the source and why it was chosen, as `plan` prints it (homelab.memory.planning_budget)

    @property
    def reserved(self) -> int:
        return sum(line.reservation for line in self.lines)

    @property
    def limits(self) -> int:
        return sum(line.limit for line in self.lines)

    @property
    def for_apps(self) -> int:
        return self.ram - OS_HEADROOM

    @property
    def arc_room(self) -> int:
        """What the reservations and the OS leave: the most the ZFS ARC should be allowed to take."""
        return max(0, self.for_apps - self.reserved)

    @property
    def arc_max(self) -> int:
        """The zfs_arc_max to set: the ARC's room rounded down to whole MiB (0: nothing left to give it)."""
        return self.arc_room // MIB * MIB

    @property
    def overcommit(self) -> float:
        return self.limits / self.for_apps if self.for_apps > 0 else float("inf")

    def problems(self) -> list[str]:
        """Refusals: the reservations do not fit. Names the largest, which are the ones to lower."""
        if self.reserved <= self.for_apps:
            return []
        largest = sorted(self.lines, key=lambda line: -line.reservation)[:3]
        names = ", ".join(f"{line.service} {_gib(line.reservation)}" for line in largest)
        return [
            f"reservations {_gib(self.reserved)} exceed the {_gib(self.for_apps)} left for apps "
            f"({_gib(self.ram)} RAM - {_gib(OS_HEADROOM)} for the OS): lower apps.<app>.resources.reservation "
            f"(largest: {names}) or disable an app"
        ]

    def warnings(self) -> list[str]:
        if self.overcommit <= OVERCOMMIT_FACTOR:
            return []
        return [
            f"memory limits add up to {_gib(self.limits)}, {self.overcommit:.1f}x the {_gib(self.for_apps)} "
            f"left for apps (more than {OVERCOMMIT_FACTOR}x): several apps at their limit at once would "
            "push the box into swap or the host's OOM killer"
        ]

    def summary(self) -> list[str]:
        """The budget as `plan` and `doctor` print it: the totals, then one line per service."""
        rows = [
            f"RAM {_gib(self.ram)} ({self.ram_why or self.ram_source}) - {_gib(OS_HEADROOM)} for the OS = "
            f"{_gib(self.for_apps)} for apps; reservations {_gib(self.reserved)}; "
            f"ZFS ARC cap {_gib(self.arc_max)}; limits "
            f"{_gib(self.limits)} ({self.overcommit:.2f}x, warning past {OVERCOMMIT_FACTOR}x)"
        ]
        rows += [
            f"  {line.service:24} reserves {_mib(line.reservation):>9}  limit {_mib(line.limit):>9}"
            for line in self.lines
        ]
        return rows

    def as_json(self) -> dict[str, Any]:
        return {
            "ram": self.ram,
            "ram_source": self.ram_source,
            "ram_why": self.ram_why,
            "os_headroom": OS_HEADROOM,
            "for_apps": self.for_apps,
            "reserved": self.reserved,
            "limits": self.limits,
            "zfs_arc_max": self.arc_max,
            "overcommit": round(self.overcommit, 3),
            "overcommit_factor": OVERCOMMIT_FACTOR,
            "services": [{"service": x.service, "reservation": x.reservation, "limit": x.limit} for x in self.lines],
            "problems": self.problems(),
            "warnings": self.warnings(),
        }


def budget(plan: Plan, ram: int | None = None, ram_source: str = "profile", ram_why: str = "") -> Budget:
    """The plan's budget against `ram` bytes; by default the hardware profile's memory."""
    lines = []
    for stack in plan.stacks.values():
        for service in stack.services.values():
            r = service.resources
            if r and r.memory:
                reservation = size_bytes(r.reservation) if r.reservation else 0
                lines.append(Line(f"{stack.name}/{service.name}", reservation, size_bytes(r.memory)))
    return Budget(plan.profile.memory_gb * GIB if ram is None else ram, tuple(lines), ram_source, ram_why)


def over_budget(plan: Plan, loaded: LoadedConfig) -> list[str]:
    """`file:line: key: problem` when the reservations do not fit the profile's RAM, pointing at the app
    override that reserves the most (the thing to lower), or at server.profile when no app overrides."""
    box = budget(plan)
    problems = box.problems()
    if not problems:
        return []
    by_size = [line.service.split("/")[1] for line in sorted(box.lines, key=lambda line: -line.reservation)]
    apps = [name for name in by_size if ("apps", name, "resources") in loaded.lines]
    loc = ("apps", apps[0], "resources") if apps else ("server", "profile")
    return [f"{loaded.where(loc)}: {'.'.join(map(str, loc))}: {problem}" for problem in problems]


def _gib(n: int) -> str:
    return f"{n / GIB:.1f} GiB"


def _mib(n: int) -> str:
    return f"{n // MIB} MiB"
