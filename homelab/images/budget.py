"""The box's RAM budget: every service's reservation and limit against the machine's memory, with room
kept for the OS, and what is left for the ZFS ARC. Pure arithmetic on the Plan (no I/O): the caller says
how much RAM the box has (the hardware profile's, or the host's when planning for this machine).
docs/resources.md walks through the example's numbers."""

from __future__ import annotations

from dataclasses import dataclass

from homelab.config.resources import size_bytes
from homelab.plan import Plan

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


def budget(plan: Plan, ram: int) -> Budget:
    lines = []
    for stack in plan.stacks.values():
        for service in stack.services.values():
            r = service.resources
            if r and r.memory:
                reservation = size_bytes(r.reservation) if r.reservation else 0
                lines.append(Line(f"{stack.name}/{service.name}", reservation, size_bytes(r.memory)))
    return Budget(ram, tuple(lines))


def _gib(n: int) -> str:
    return f"{n / GIB:.1f} GiB"
