"""Diff a Rendering against disk and write only what changed, all or nothing.

A manifest (`.homelab-manifest.json` in the stacks folder) records the hash of every file we wrote;
the secrets folder has its own (0600, so a hash of a short password is never world-readable). A file
that exists but is not ours, or that someone edited since we wrote it, is never overwritten without
`force`. Secret files go to `<stacks>/secrets/` (0700), each 0600 and owned by the uid of the service
that reads it; their contents never appear in a report.

Writing is a transaction: every new content is staged next to its target (each write checked, short
writes included), and only when all are staged are they renamed into place; the replaced files are
kept as hard links until the end, so a failed swap is rolled back. Any failure leaves the previous
output as it was, removes what was staged, and raises WriteFailed naming the path and the OS error.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from homelab import files, signals
from homelab.errors import RefusedToOverwrite, WriteFailed
from homelab.layout import SECRETS_DIR
from homelab.ownership import MANIFEST, manifest_bytes, write_all
from homelab.ownership import digest as _sha
from homelab.plan_model import Plan

Status = Literal["new", "changed", "identical", "obsolete"]
NEW, OLD = ".homelab-new", ".homelab-old"  # a file staged next to its target; a replaced one, kept until the end
log = logging.getLogger(__name__)
MAX_OUTPUT_BYTES = 64 * files.MIB  # far above any file homelab renders: a bigger one is not ours


@dataclass(frozen=True)
class FileChange:
    path: str  # relative to the stacks folder
    status: Status
    secret: bool = False


@dataclass
class WriteReport:
    changes: list[FileChange] = field(default_factory=list)

    def by_status(self, status: Status) -> list[FileChange]:
        return [c for c in self.changes if c.status == status]

    @property
    def changed(self) -> bool:
        return any(c.status != "identical" for c in self.changes)

    def stacks_affected(self, plan: Plan) -> list[str]:
        touched = {c.path.split("/", 1)[0] for c in self.changes if c.status != "identical" and not c.secret}
        secrets = {c.path.split("/", 1)[1] for c in self.changes if c.status != "identical" and c.secret}
        for stack in plan.stacks.values():
            if any(name in secrets for s in stack.services.values() for name, _ in s.secrets):
                touched.add(stack.name)
        return [name for name in plan.stacks if name in touched]


def _failed(path: Path, exc: OSError) -> WriteFailed:
    reason = exc.strerror or str(exc)
    return WriteFailed(f"cannot write {path}: {reason}; the previous output is unchanged")


def _unreadable(exc: files.Unreadable) -> WriteFailed:
    return WriteFailed(f"cannot read {exc.path}: {exc.reason}; nothing was written")


def _read_manifest(path: Path) -> dict[str, str] | None:
    """The recorded hashes, or None when there is no manifest (a folder homelab never wrote)."""
    try:
        raw = files.read_if_exists(path, MAX_OUTPUT_BYTES)  # None: also a file where the folder goes
        if raw is None:
            return None
        data = json.loads(raw.decode("utf-8"))
        return {str(k): str(v) for k, v in dict(data.get("files", {})).items()}
    except (ValueError, AttributeError, TypeError):
        return {}  # damaged: nothing in it can vouch for a file
    except files.Unreadable as exc:
        if exc.kind in ("special", "too_large"):
            return {}  # not a manifest homelab wrote: it vouches for nothing
        raise _unreadable(exc) from None


def _current(path: Path) -> bytes | None:
    try:
        return files.read_if_exists(path, MAX_OUTPUT_BYTES)
    except files.Unreadable as exc:
        if exc.kind in ("special", "too_large"):
            return b""  # a folder, FIFO or huge file where a file goes: differs from any content, never ours
        raise _unreadable(exc) from None


def _check_out(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise WriteFailed(f"cannot write {out}: it is a file, not a folder; the previous output is unchanged")


def _status(current: bytes | None, content: bytes, recorded: str | None, *, trusted: bool) -> tuple[Status, bool]:
    """The change, and whether writing it would replace something homelab did not write."""
    if current is None:
        return "new", False
    if current == content:
        return "identical", False
    return "changed", not trusted and recorded != _sha(current)


def diff(out: Path, files: dict[str, bytes], secret_files: dict[str, bytes], *, force: bool = False) -> WriteReport:
    _check_out(out)
    manifest = _read_manifest(out / MANIFEST)
    secret_manifest = _read_manifest(out / SECRETS_DIR / MANIFEST)
    # an output written before secrets had a manifest: its secrets cannot be told apart, so trust them once
    legacy_secrets = manifest is not None and secret_manifest is None
    report = WriteReport()
    refused = []
    for rel, content in sorted(files.items()):
        status, foreign = _status(_current(out / rel), content, (manifest or {}).get(rel), trusted=force)
        refused += [rel] if foreign else []
        report.changes.append(FileChange(rel, status))
    for name, content in sorted(secret_files.items()):
        rel = f"{SECRETS_DIR}/{name}"
        recorded = (secret_manifest or {}).get(name)
        status, foreign = _status(_current(out / rel), content, recorded, trusted=force or legacy_secrets)
        refused += [rel] if foreign else []
        report.changes.append(FileChange(rel, status, secret=True))
    for rel, digest in sorted((manifest or {}).items()):
        current = _current(out / rel) if rel not in files else None
        if current is not None and _sha(current) == digest:
            report.changes.append(FileChange(rel, "obsolete"))
    if refused:
        listing = "\n  ".join(str(out / r) for r in refused)
        raise RefusedToOverwrite(
            f"not overwriting files homelab did not write or that were edited by hand:\n  {listing}\n"
            "edit homelab.yaml instead, or pass --force to replace them"
        )
    return report


@dataclass
class _Transaction:
    """Stage files next to their targets, then swap them in; undo everything on any failure."""

    staged: list[tuple[Path, Path]] = field(default_factory=list)  # (temp, target)
    created_dirs: list[Path] = field(default_factory=list)
    kept: list[tuple[Path, Path]] = field(default_factory=list)  # (backup link, original) of swapped files
    swapped: list[Path] = field(default_factory=list)

    def ensure_dir(self, path: Path, mode: int = 0o755) -> None:
        missing = [p for p in (path, *path.parents) if not p.exists()]
        for folder in reversed(missing):
            try:
                folder.mkdir(mode if folder == path else 0o755)
            except OSError as exc:
                raise _failed(folder, exc) from None
            self.created_dirs.append(folder)
        if not path.is_dir():
            raise _failed(path, OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR)))

    def stage(self, target: Path, content: bytes, mode: int, owner: tuple[int, int] | None = None) -> None:
        self.ensure_dir(target.parent)
        temp = target.with_name(f".{target.name}{NEW}")
        self.staged.append((temp, target))  # before it exists: an abort at any point removes it
        try:
            with contextlib.suppress(FileNotFoundError):
                temp.unlink()  # left by a process that was killed mid-render
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except OSError as exc:
            raise _failed(target, exc) from None
        try:
            try:
                write_all(fd, content)
                os.fchmod(fd, mode)
                if owner is not None:
                    os.fchown(fd, *owner)
            finally:
                os.close(fd)  # some file systems report a full disk only here
        except OSError as exc:
            raise _failed(target, exc) from None

    def _swap(self, temp: Path | None, target: Path) -> None:
        moved = False
        if target.exists():
            backup = target.with_name(f".{target.name}{OLD}")
            with contextlib.suppress(FileNotFoundError):
                backup.unlink()
            try:
                os.link(target, backup)  # the target stays in place until the atomic rename below
            except OSError:
                target.replace(backup)  # a file system without hard links: move it aside instead
                moved = True
            self.kept.append((backup, target))
        if temp is not None:
            temp.replace(target)
        elif not moved:
            target.unlink()
        self.swapped.append(target)

    def commit(self, removals: list[Path]) -> None:
        """Rename every staged file into place (and remove `removals`); roll back if any step fails."""
        try:
            for temp, target in self.staged:
                self._swap(temp, target)
            for target in removals:
                self._swap(None, target)
        except OSError as exc:
            self._roll_back()
            raise _failed(Path(exc.filename or "output"), exc) from None
        self.staged.clear()
        self.created_dirs.clear()
        for backup, _ in self.kept:
            with contextlib.suppress(OSError):
                backup.unlink()

    def _roll_back(self) -> None:
        """Put back every original (swapped, or moved aside before its swap failed); drop new files."""
        kept = {original: backup for backup, original in self.kept}
        for target in reversed(self.swapped):
            if target not in kept:
                with contextlib.suppress(OSError):
                    target.unlink()  # a new file: there was nothing before it
        for original, backup in kept.items():
            with contextlib.suppress(OSError):
                if original in self.swapped or not original.exists():
                    backup.replace(original)
                else:
                    backup.unlink()  # a link to an original that never moved
        self.kept.clear()

    def abort(self) -> None:
        for temp, _ in self.staged:
            with contextlib.suppress(OSError):
                temp.unlink()
        for backup, _ in self.kept:
            with contextlib.suppress(OSError):
                backup.unlink()
        for folder in reversed(self.created_dirs):
            with contextlib.suppress(OSError):
                folder.rmdir()


@contextlib.contextmanager
def _transaction() -> Iterator[_Transaction]:
    tx = _Transaction()
    try:
        yield tx
    finally:
        tx.abort()  # a no-op after a commit; after a failure it removes every trace of the attempt


def _owners(plan: Plan) -> dict[str, tuple[int, int] | None]:
    can_chown = hasattr(os, "geteuid") and os.geteuid() == 0
    return {name: (s.owner_uid, s.owner_gid) if can_chown else None for name, s in plan.secrets.items()}


def _leftovers(out: Path, report: WriteReport) -> list[Path]:
    """Staged or kept files a killed run (kill -9, power loss) left in the folders this write touches."""
    folders = {out, out / SECRETS_DIR, *((out / c.path).parent for c in report.changes)}
    found = [p for f in sorted(folders) if f.is_dir() for s in (NEW, OLD) for p in f.glob(f".*{s}")]
    return sorted(set(found))


def _clean_leftovers(out: Path, report: WriteReport) -> None:
    for path in _leftovers(out, report):
        try:
            path.unlink()
        except OSError as exc:
            raise _failed(path, exc) from None
        log.warning("removed %s, left by an interrupted homelab run", path)


def apply(out: Path, report: WriteReport, files: dict[str, bytes], secret_files: dict[str, bytes], plan: Plan) -> None:
    """Write what `diff` found new or changed and remove obsolete files we wrote, all or nothing: SIGINT
    and SIGTERM wait until the write is done or undone (homelab/signals.py), so no signal cuts it in two."""
    with signals.deferred():
        _clean_leftovers(out, report)
        _apply(out, report, files, secret_files, plan)


def _apply(out: Path, report: WriteReport, files: dict[str, bytes], secret_files: dict[str, bytes], plan: Plan) -> None:
    secrets_dir = out / SECRETS_DIR
    owners = _owners(plan)
    up_to_date = (out / MANIFEST).exists() and (secrets_dir / MANIFEST).exists()
    with _transaction() as tx:
        tx.ensure_dir(secrets_dir, 0o700)
        if report.changed or not up_to_date:
            for change in report.changes:
                if change.status not in ("new", "changed"):
                    continue
                if change.secret:
                    name = change.path.split("/", 1)[1]
                    tx.stage(secrets_dir / name, secret_files[name], 0o600, owners.get(name))
                else:
                    tx.stage(out / change.path, files[change.path], _mode_for(change.path))
            tx.stage(secrets_dir / MANIFEST, manifest_bytes({name: _sha(c) for name, c in secret_files.items()}), 0o600)
            tx.stage(out / MANIFEST, manifest_bytes({rel: _sha(c) for rel, c in files.items()}), 0o644)
            tx.commit([out / c.path for c in report.by_status("obsolete")])
    _fix_secret_modes(secrets_dir, owners)  # after the swap: a failed render changes no mode either


def _mode_for(rel: str) -> int:
    return 0o755 if rel.endswith(".sh") else 0o644


def _fix_secret_modes(secrets_dir: Path, owners: dict[str, tuple[int, int] | None]) -> None:
    """The folder stays 0700, secrets 0600 and owned by their reader, even if someone loosened them by
    hand and nothing else changed."""
    try:
        if secrets_dir.stat().st_mode & 0o777 != 0o700:
            secrets_dir.chmod(0o700)
    except OSError as exc:
        raise WriteFailed(f"cannot fix the mode of {secrets_dir}: {exc.strerror}") from None
    for name, owner in owners.items():
        path = secrets_dir / name
        try:
            info = path.stat()
            if info.st_mode & 0o777 != 0o600:
                path.chmod(0o600)
            if owner is not None and (info.st_uid, info.st_gid) != owner:
                os.chown(path, *owner)
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise WriteFailed(f"cannot fix the mode of {path}: {exc.strerror}") from None
