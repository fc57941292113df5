"""The systemd driver: `systemctl` calls go through here (runtime.process), one method per action."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from homelab.runtime import process

PROGRAM = "systemctl"


class SystemdDriver(Protocol):
    """What homelab asks of systemd. `Systemctl` runs the program; tests.fakes.systemd.FakeSystemd records."""

    def daemon_reload(self) -> None: ...

    def enable_now(self, units: Sequence[str]) -> None: ...


class Systemctl:
    def __init__(self, binary: str = PROGRAM, timeout: float = 60):
        self.binary = binary
        self.timeout = timeout

    def daemon_reload(self) -> None:
        process.run([self.binary, "daemon-reload"], timeout=self.timeout)

    def enable_now(self, units: Sequence[str]) -> None:
        process.run([self.binary, "enable", "--now", *units], timeout=self.timeout)
