"""A recording stand-in for homelab.runtime.machine.Machine."""

from __future__ import annotations


class FakeMachine:
    def __init__(self, hostname: str = "nas", mem_total: int | None = None) -> None:
        self.calls: list[str] = []
        self._hostname = hostname
        self._mem_total = mem_total

    def hostname(self) -> str:
        self.calls.append("hostname")
        return self._hostname

    def mem_total(self) -> int | None:
        self.calls.append("mem_total")
        return self._mem_total
