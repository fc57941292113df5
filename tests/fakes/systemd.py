"""A recording stand-in for homelab.runtime.systemd.Systemctl."""

from __future__ import annotations

from collections.abc import Sequence


class FakeSystemd:
    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []
        self.enabled: set[str] = set()

    def daemon_reload(self) -> None:
        self.calls.append(("daemon-reload",))

    def enable_now(self, units: Sequence[str]) -> None:
        self.calls.append(("enable", "--now", *units))
        self.enabled |= set(units)
