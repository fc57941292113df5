"""Names the remote cannot hold under their own name, stored under a short derived one.

Every name the filesystem allows is backed up; these are uploaded as `.homelab-names/<sha256 of the path's
bytes>` in the dataset's folder on the remote, and the listing (homelab.backup.tree.Entry.stored_as) keeps
the real name, byte for byte:
- names the crypt makes too long: a name of 144 bytes or more encrypts (padded to 16 bytes, base32) to more
  than 255 characters, which most remotes (every filesystem behind local, sftp, webdav) refuse; and paths
  whose encrypted form is longer than MAX_ENCRYPTED_PATH characters (PATH_MAX is 4096 on the remote's disk);
- Unicode twins: names in one folder that differ only in normalisation (NFC "é" vs NFD "e" + U+0301), which
  rclone treats as one object ("Duplicate object found in source - ignoring"): every one of them;
- names that are not UTF-8 (rclone reads each invalid byte as U+FFFD) and names holding U+201B (rclone's
  quoting character: rclone 1.75 cannot open such a file);
- anything under a folder that is itself one of these, and a real path at `.homelab-names` (so no real name
  can collide with a derived one).
A symlink or folder so named has no object: the listing holds all of it (target, owner, mode, mtime).

The sync leaves these names and `.homelab-names` out (rclone filters, homelab.runtime.rclone), and a second
sync uploads the derived objects from a folder of symlinks to the snapshot's files (`stage`) with
--copy-links, with the same --backup-dir archive as the main sync: what it replaces or deletes is kept.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import shutil
import tempfile
import unicodedata
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

from homelab.backup import longpath
from homelab.backup.tree import IN_LISTING, Entry
from homelab.runtime.rclone import LINK_SUFFIX, RcloneDriver, encode_name

FOLDER = ".homelab-names"  # in the dataset's folder on the remote; a real path there is derived too
MAX_NAME_BYTES = 143  # 144 bytes pad to 160, which base32-encodes to 256 characters
MAX_ENCRYPTED_PATH = 3000  # characters below the dataset's folder, leaving room for the remote's own path
QUOTE = "\u201b"


def _spelled_bytes(spelled: str) -> int:
    """Bytes of a name as rclone spells it (encode_name): what the crypt encrypts."""
    return len(spelled.encode("utf-8", errors="surrogateescape"))


def _encrypted_chars(size: int) -> int:
    return math.ceil((size // 16 + 1) * 16 * 8 / 5)


def encrypted_length(name: str) -> int:
    """Characters of the crypt's standard encryption of a name: PKCS#7 padding to 16 bytes, base32."""
    return _encrypted_chars(_spelled_bytes(encode_name(name)))


def _own_name_unfit(name: str, size: int) -> bool:
    """`size`: the name's bytes as rclone spells it."""
    return any("\udc80" <= c <= "\udcff" for c in name) or QUOTE in name or size > MAX_NAME_BYTES


def object_name(path: str) -> str:
    return f"{FOLDER}/{hashlib.sha256(os.fsencode(path)).hexdigest()}"


def assign(entries: list[Entry]) -> list[Entry]:
    """The entries (sorted, as tree.scan gives them), those that need a derived name with `stored_as` set."""
    unfit: set[str] = set()
    encrypted: dict[str, int] = {"": 0}
    twins: dict[tuple[str, str], list[str]] = defaultdict(list)
    for e in entries:
        if not e.path:
            continue
        folder, _, name = e.path.rpartition("/")
        spelled = encode_name(name)  # once per entry: rclone's spelling serves all three tests below
        size = _spelled_bytes(spelled)
        encrypted[e.path] = encrypted[folder] + bool(folder) + _encrypted_chars(size)
        if (
            _own_name_unfit(name, size)
            or encrypted[e.path] > MAX_ENCRYPTED_PATH
            or e.path == FOLDER
            or e.path.startswith(FOLDER + "/")
        ):
            unfit.add(e.path)
        # rclone's view of the name: what it compares, normalised as its sync does
        twins[(folder, unicodedata.normalize("NFC", spelled))].append(e.path)
    unfit.update(p for paths in twins.values() if len(paths) > 1 for p in paths)
    out = []
    below = _below(entries, unfit)
    for e in entries:
        if e.path in below:
            e = e._replace(stored_as=object_name(e.path) if e.kind == "f" else IN_LISTING)
        out.append(e)
    return out


def _below(entries: list[Entry], roots: set[str]) -> set[str]:
    """The paths that are one of roots or below one (each folder comes before what it holds, as sorted): one
    look-up per entry, not one per folder above it (a path of 100 KB has hundreds)."""
    found: set[str] = set()
    for e in entries:
        if e.path and (e.path in roots or e.path.rpartition("/")[0] in found):
            found.add(e.path)
    return found


def derived(entries: list[Entry]) -> list[Entry]:
    return [e for e in entries if e.stored_as]


def skipped(entries: list[Entry]) -> list[str]:
    """What the main sync and check leave out, as rclone names: the derived folder, and each derived entry
    not inside a derived folder (the filter leaves out everything below a folder)."""
    folders = {e.path for e in entries if e.kind == "d" and e.stored_as}
    inside = _below(entries, folders)
    out = [FOLDER]
    for e in derived(entries):
        if e.path.rpartition("/")[0] not in inside:
            out.append(encode_name(e.path) + (LINK_SUFFIX if e.kind == "l" else ""))
    return out


def on_remote(rclone: RcloneDriver, dst: str) -> bool:
    """Whether the dataset's folder `dst` on the remote has a derived-name folder (objects, or left empty). A
    remote that does not answer may: the caller's sync or check then says why."""
    try:
        return FOLDER in {name.rstrip("/") for name in rclone.list_dirs(dst)}
    except Exception:
        return True


@contextlib.contextmanager
def stage(entries: list[Entry], source: Path, scratch: Path) -> Iterator[Path]:
    """A folder of symlinks, each named as its derived object, to the snapshot's file: what the second sync
    and check read (with --copy-links). A file deeper than PATH_MAX is pointed at through a chain of
    symlinks beside that folder (homelab.backup.longpath.Hops)."""
    scratch.mkdir(mode=0o700, parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="names-", dir=scratch) as folder:
        staged, hops = Path(folder) / "objects", longpath.Hops(Path(folder) / "hops")
        staged.mkdir()
        for e in derived(entries):
            if e.stored_as != IN_LISTING:
                (staged / Path(e.stored_as).name).symlink_to(hops.to(source / e.path, e.path))
        yield staged


def place(target: Path, entries: list[Entry]) -> list[str]:
    """After a download into target: each derived object moved to its real name, each derived symlink made
    from the listing (a path deeper than PATH_MAX through a short one, homelab.backup.longpath). The
    derived objects found missing (the caller reports them)."""
    landed = target / FOLDER
    holding = None
    if landed.is_dir():
        holding = Path(tempfile.mkdtemp(prefix=".homelab-placing-", dir=target))
        landed.rename(holding / "objects")  # a real path under .homelab-names may be placed below
    missing = []
    for e in derived(entries):
        if e.kind == "d":
            continue
        found = holding / "objects" / Path(e.stored_as).name if holding and e.kind == "f" else None
        if e.kind == "f" and (found is None or not found.exists()):
            missing.append(e.path)
            continue
        with longpath.short(target / e.path, create=True) as path:
            path.parent.mkdir(parents=True, exist_ok=True)
            if found is None:
                path.symlink_to(e.target)
            else:
                found.replace(path)
    if holding:
        shutil.rmtree(holding)
    return missing
