"""rclone's JSON log, read while a command runs and after: stats for progress, each object finished,
errors (with ENOSPC told apart), cryptcheck's --combined report, and the stall watchdog (`Tail`)."""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

UNCHECKED = "hashes could not be checked"  # check/cryptcheck: "N hashes could not be checked"
ENOSPC_MARKERS = (
    "no space left on device",
    "enospc",
    "disk quota exceeded",
    "insufficient storage",
    "not enough space",
    "remaining disk space",
)
ProgressFn = Callable[["Stats"], None]
CopiedFn = Callable[[str], None]
# crypt's upload hashes the encrypted bytes it sends and compares that with the hash the remote gives for the
# stored object (rclone backend/crypt/crypt.go, put: a mismatch removes the object and fails the transfer);
# when both are known it logs, at DEBUG, "<hash> = <hex> OK" on the upload's temporary `.partial` name
_HASH_OK = re.compile(r"(?!size )\w+ = [0-9a-f]+ OK")
_PARTIAL = re.compile(r"(.*)\.[0-9a-f]{8}\.partial")


@dataclass
class Stats:
    bytes: int = 0
    total_bytes: int = 0
    transfers: int = 0
    total_transfers: int = 0
    errors: int = 0
    elapsed: float = 0.0


@dataclass
class Result:
    """How a long command ended: its errors (from its log) and the objects it finished writing."""

    ok: bool
    returncode: int
    stats: Stats = field(default_factory=Stats)
    errors: list[str] = field(default_factory=list)
    copied: list[str] = field(default_factory=list)  # paths (decrypted names) written this run
    verified: list[str] = field(default_factory=list)  # of those, checked by hash as they were written
    timed_out: bool = False

    @property
    def unverified(self) -> list[str]:
        """The objects written whose upload rclone did not check by hash (the remote gave none)."""
        checked = set(self.verified)
        return [name for name in self.copied if name not in checked]

    @property
    def enospc(self) -> bool:
        return any(m in e.lower() for e in self.errors for m in ENOSPC_MARKERS)

    def why(self, what: str) -> str:
        """One line naming the cause, for a run record and the user."""
        if self.enospc:
            first = next(e for e in self.errors if any(m in e.lower() for m in ENOSPC_MARKERS))
            return f"the remote is full (ENOSPC): {first}"
        if self.timed_out:
            return f"rclone {what} stopped: {self.errors[0]}"
        if self.returncode < 0:
            return f"rclone {what} was killed (signal {-self.returncode})"
        first = self.errors[0] if self.errors else f"rclone exited with {self.returncode}"
        more = f" (and {len(self.errors) - 1} more errors)" if len(self.errors) > 1 else ""
        return f"{what} failed: {first}{more}"


@dataclass
class CheckResult:
    """A cryptcheck: how many objects matched, and each one that did not, by kind."""

    matched: int = 0
    differ: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)  # in the source only
    extra: list[str] = field(default_factory=list)  # on the remote only
    errors: list[str] = field(default_factory=list)

    def absorb(self, other: CheckResult) -> None:
        self.matched += other.matched
        self.differ += other.differ
        self.missing += other.missing
        self.extra += other.extra
        self.errors += other.errors

    @property
    def problems(self) -> list[str]:
        return (
            [f"differs: {p}" for p in self.differ]
            + [f"missing on the remote: {p}" for p in self.missing]
            + [f"not in the snapshot: {p}" for p in self.extra]
            + [f"error: {p}" for p in self.errors]
        )


def _json_line(line: str) -> dict[str, Any] | None:
    # a sync's DEBUG chatter (all but crypt's hash lines: _HASH_OK) is skipped unparsed
    if '"level":"debug"' in line and (' OK","' not in line or '"msg":"size = ' in line):
        return None
    with contextlib.suppress(ValueError):
        entry = json.loads(line)
        if isinstance(entry, dict):
            return entry
    return None


def _stats(entry: dict[str, Any]) -> Stats | None:
    s = entry.get("stats")
    if not isinstance(s, dict):
        return None
    return Stats(
        int(s.get("bytes", 0)),
        int(s.get("totalBytes", 0)),
        int(s.get("transfers", 0)),
        int(s.get("totalTransfers", 0)),
        int(s.get("errors", 0)),
        float(s.get("elapsedTime", 0.0)),
    )


def _moved(entry: dict[str, Any]) -> tuple[Any, ...] | None:
    """What advances while a command works: bytes, objects checked, listed, transferred, deleted."""
    s = entry.get("stats")
    if not isinstance(s, dict):
        return None
    return tuple(s.get(k) for k in ("bytes", "checks", "listed", "transfers", "deletes", "renames"))


class Reading:
    """What a command's log has said so far, entry by entry: its last stats, errors, the objects written and
    those of them checked by hash as they were written."""

    def __init__(self) -> None:
        self.stats = Stats()
        self.errors: list[str] = []
        self.copied: list[str] = []
        self.verified: dict[str, None] = {}  # in log order; a dict for the tail's look-ups

    def read(self, entry: dict[str, Any]) -> tuple[Stats | None, str | None]:
        """(its stats, the object it says was written), each if any."""
        stats = _stats(entry)
        self.stats = stats or self.stats
        level = entry.get("level", "")
        msg = str(entry.get("msg", ""))
        obj = entry.get("object")
        if level in ("error", "critical"):
            self.errors.append(f"{obj}: {msg}" if obj else msg)
        elif level == "notice" and msg.endswith(UNCHECKED):
            # check/cryptcheck exit 0 even when the remote gave no hash to compare (e.g. a WebDAV server that
            # publishes no checksums): those objects were not verified, so this is a failure, not a match
            self.errors.append(f"{obj}: {msg} (the remote gave no hash for them)" if obj else msg)
        elif name := _copied(entry):
            self.copied.append(name)
            return stats, name
        elif name := _verified(entry):
            self.verified[name] = None
        return stats, None

    def result(self, returncode: int) -> Result:
        ok = returncode == 0 and not self.errors
        return Result(ok, returncode, self.stats, list(self.errors), list(self.copied), list(self.verified))


def parse_log(log: Path, returncode: int) -> Result:
    """The result of a command whose log is complete: what a tail reads in one go."""
    tail = Tail(log, None, None, stall=float("inf"))
    tail.poll(final=True)
    return tail.result(returncode)


def _copied(entry: dict[str, Any]) -> str | None:
    """The object a log entry says was written completely (rclone logs it after the rename from .partial)."""
    obj = entry.get("object")
    if entry.get("level") == "info" and obj and str(entry.get("msg", "")).startswith("Copied"):
        return str(obj)
    return None


def _verified(entry: dict[str, Any]) -> str | None:
    """The object a log entry says crypt's upload checked by hash (_HASH_OK), by its final name."""
    obj = entry.get("object")
    if entry.get("level") != "debug" or not obj or not _HASH_OK.fullmatch(str(entry.get("msg", ""))):
        return None
    temporary = _PARTIAL.fullmatch(str(obj))
    return temporary.group(1) if temporary else str(obj)


def parse_combined(path: Path) -> CheckResult:
    """rclone's --combined report: one "<mark> <path>" line per object ("+" only in the source, "-" only on
    the remote, "*" differs, "!" error, "=" same)."""
    out = CheckResult()
    if not path.exists():
        return out
    for line in path.read_bytes().decode("utf-8", errors="surrogateescape").splitlines():
        mark, _, name = line.partition(" ")
        if mark == "=":
            out.matched += 1
        target = {"*": out.differ, "+": out.missing, "-": out.extra, "!": out.errors}.get(mark)
        if target is not None:
            target.append(name)
    return out


class Tail:
    """Reads a command's JSON log as it grows: stats to `progress`, finished objects that were not checked
    by hash as they were written to `on_copied`, and a reason to stop the command when nothing has advanced
    for `stall` seconds. What it read is the command's result (`result`): the log is read once."""

    def __init__(
        self,
        log: Path,
        progress: ProgressFn | None,
        on_copied: CopiedFn | None,
        stall: float,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.log, self.progress, self.on_copied, self.stall, self.clock = log, progress, on_copied, stall, clock
        self.reading = Reading()
        self._position, self._partial = 0, b""
        self._moved: tuple[Any, ...] | None = None
        self._since = clock()

    def poll(self, *, final: bool = False) -> str | None:
        """Read what was added; `final`: the command has ended, a last line without its newline is read too."""
        last = None
        for entry in self._new_entries(final):
            stats, name = self.reading.read(entry)
            moved = _moved(entry)
            # errors and retries are not progress: a remote that stopped answering makes plenty of them
            if (moved is not None and moved != self._moved) or name:
                self._moved = moved or self._moved
                self._since = self.clock()
            last = stats or last
            if name and self.on_copied and name not in self.reading.verified:
                self.on_copied(name)
        if last and self.progress:
            self.progress(last)
        idle = self.clock() - self._since
        if idle >= self.stall:
            return f"no progress for {idle:.0f} s: the remote stopped answering (backup.stall_timeout)"
        return None

    def result(self, returncode: int) -> Result:
        return self.reading.result(returncode)

    def _new_entries(self, final: bool) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        with self.log.open("rb") as handle:  # bytes: a read may end inside a line, even inside a character
            handle.seek(self._position)
            chunk = self._partial + handle.read()
            self._position = handle.tell()
        whole, _, self._partial = chunk.rpartition(b"\n")  # the rest: a line rclone has not finished writing
        if final:
            whole, self._partial = chunk, b""
        text = whole.decode("utf-8", errors="surrogateescape")  # whole lines: no character cut in two
        found = (_json_line(line) for line in text.split("\n"))
        return [e for e in found if e is not None]
