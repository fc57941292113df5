"""Which files homelab owns, and how it writes them.

One mechanism for every folder homelab writes into (the stacks folder, the systemd unit folder):
a manifest (`.homelab-manifest.json` in that folder) records the SHA-256 of every file homelab
wrote there. A file is ours when the manifest lists it with its current contents; a file nobody
listed, or that someone edited since, is never overwritten without `--force`. Unlike a marker
comment, this works for formats without comments (JSON dashboards) and also notices hand edits.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path

from homelab.errors import RefusedToOverwrite
from homelab.files import MIB, Unreadable, read_if_exists

MANIFEST = ".homelab-manifest.json"


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_manifest(folder: Path) -> dict[str, str]:
    """Path relative to `folder` -> SHA-256 of what homelab last wrote there ({} when none)."""
    try:
        raw = read_if_exists(folder / MANIFEST, 64 * MIB)
        return dict(json.loads(raw.decode("utf-8")).get("files", {})) if raw is not None else {}
    except ValueError:
        return {}


def is_ours(folder: Path, relative: str) -> bool:
    """True when `folder/relative` is absent, or holds exactly what homelab last wrote there."""
    try:
        current = read_if_exists(folder / relative, 64 * MIB)
    except Unreadable as exc:
        if exc.kind == "other":
            raise
        return False  # a folder, FIFO or huge file: not what homelab wrote
    return current is None or read_manifest(folder).get(relative) == digest(current)


def write_manifest(folder: Path, files: Mapping[str, bytes]) -> None:
    """Record `files` (relative path -> the bytes just written) as everything homelab owns in `folder`."""
    _save(folder, {rel: digest(content) for rel, content in files.items()})


def write_owned(folder: Path, files: Mapping[str, bytes], mode: int = 0o644) -> list[Path]:
    """Write `files` (relative path -> bytes) into a folder homelab shares with others (systemd's unit
    folder) and record them as ours; other files there stay unrecorded. Refuses, writing nothing,
    when one of them exists and is not ours. Returns the paths written."""
    foreign = [str(folder / rel) for rel in sorted(files) if not is_ours(folder, rel)]
    if foreign:
        listing = "\n  ".join(foreign)
        raise RefusedToOverwrite(f"not overwriting files homelab did not write or that were edited:\n  {listing}")
    for rel, content in files.items():
        write_atomic(folder / rel, content, mode)
    _save(folder, read_manifest(folder) | {rel: digest(content) for rel, content in files.items()})
    return [folder / rel for rel in files]


def _save(folder: Path, digests: Mapping[str, str]) -> None:
    write_atomic(folder / MANIFEST, manifest_bytes(digests), 0o644)


def manifest_bytes(digests: Mapping[str, str]) -> bytes:
    """A manifest's contents: relative path -> SHA-256."""
    return (json.dumps({"files": dict(sorted(digests.items()))}, indent=1) + "\n").encode()


def write_atomic(path: Path, content: bytes, mode: int) -> None:
    """Write via a temporary file and rename, so a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        try:
            write_all(fd, content)
            os.fchmod(fd, mode)  # O_CREAT's mode is filtered by the umask
        finally:
            os.close(fd)
        tmp.replace(path)
    except OSError:
        tmp.unlink(missing_ok=True)  # a full disk leaves no half file behind, and the target as it was
        raise


def write_all(fd: int, content: bytes) -> None:
    """os.write may write less than asked (a nearly full disk): loop, and call a zero-byte write full."""
    view = memoryview(content)
    while view:
        written = os.write(fd, view)
        if written <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        view = view[written:]
