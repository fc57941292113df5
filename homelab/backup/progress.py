"""How a long transfer shows itself: a bar on a terminal, a plain line every few seconds otherwise."""

from __future__ import annotations

import sys
import time
from typing import TextIO

from homelab.runtime.rclone import Stats


class Progress:
    def __init__(self, label: str, stream: TextIO | None = None, interactive: bool | None = None, every: float = 10.0):
        self.label = label
        self.stream = stream or sys.stderr
        self.interactive = self.stream.isatty() if interactive is None else interactive
        self.every = every
        self._last = float("-inf")  # the first line at once, however recent the boot (monotonic starts there)
        self._pending = ""  # a plain line not written yet because the last one is too recent

    def __call__(self, stats: Stats) -> None:
        total = max(stats.total_bytes, 1)
        share = min(stats.bytes / total, 1.0)
        text = (
            f"{self.label}: {share:4.0%} {human(stats.bytes)}/{human(stats.total_bytes)} "
            f"{stats.transfers}/{stats.total_transfers} files"
        )
        if self.interactive:
            bar = "#" * int(share * 30)
            self.stream.write(f"\r[{bar:<30}] {text}")
            self.stream.flush()
        elif time.monotonic() - self._last >= self.every:
            self._last = time.monotonic()
            self._pending = ""
            self.stream.write(text + "\n")
            self.stream.flush()
        else:
            self._pending = text

    def done(self) -> None:
        """End the bar's line; in plain mode, write the final state if it was held back."""
        ending = "\n" if self.interactive else (self._pending + "\n" if self._pending else "")
        self.stream.write(ending)
        self.stream.flush()


def human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"
