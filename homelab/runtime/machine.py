"""This machine as the memory budget sees it: its host name and its RAM (MemTotal in /proc/meminfo)."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Protocol

MEMINFO = Path("/proc/meminfo")


class MachineReader(Protocol):
    def hostname(self) -> str:
        """The short host name (up to the first dot), as `server.hostname` names the server."""

    def mem_total(self) -> int | None:
        """The RAM in bytes the kernel can hand out (MemTotal); None where /proc/meminfo is unreadable."""


class Machine:
    def __init__(self, meminfo: Path = MEMINFO) -> None:
        self.meminfo = meminfo

    def hostname(self) -> str:
        return socket.gethostname().split(".")[0]

    def mem_total(self) -> int | None:
        try:
            text = self.meminfo.read_text(encoding="ascii")
        except OSError:
            return None
        for line in text.splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024  # the kernel prints kB (KiB)
        return None
