"""The sentinels kept in an app's own file formats (homelab.backup.sentinel writes and reads them):
- a commit in a bare git repository in Gitea's repository root: loose objects (zlib-deflated `<type> <size>\\0
  <body>`, named by their SHA-1) and `refs/heads/main`, as git's own documentation lays them out (git's
  gitrepository-layout(5) and the "Git Objects" chapter of Pro Git); each run adds a commit on top of the
  last, whose message is `homelab sentinel <value>`;
- one point of a Graphite metric in its whisper file (graphite-project/whisper's format: the header
  `!2LfL` aggregation, max retention, x-files-factor, archive count; per archive `!3L` offset, seconds per
  point, points; then each archive's `!Ld` points, slot `(time - first point's time) / step` modulo its size).
Both are read back by the real programs in the tests (`git fsck`, `git log`; `whisper-fetch`)."""

from __future__ import annotations

import hashlib
import os
import struct
import zlib
from pathlib import Path

BRANCH = "refs/heads/main"
FILE = "homelab-sentinel.txt"
MESSAGE = "homelab sentinel "

_HEADER, _ARCHIVE, _POINT = struct.Struct("!2LfL"), struct.Struct("!3L"), struct.Struct("!Ld")
STEP, POINTS = 3600, 24 * 400  # one point an hour, 400 days of them
_AVERAGE = 1


def _object(repo: Path, kind: str, body: bytes) -> str:
    data = f"{kind} {len(body)}\0".encode() + body
    sha = hashlib.sha1(data, usedforsecurity=False).hexdigest()
    path = repo / "objects" / sha[:2] / sha[2:]
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"tmp_{sha[2:]}")
        tmp.write_bytes(zlib.compress(data))
        tmp.chmod(0o444)  # git's loose objects are read-only
        tmp.replace(path)
    return sha


def _read_object(repo: Path, sha: str) -> bytes:
    data = zlib.decompress((repo / "objects" / sha[:2] / sha[2:]).read_bytes())
    return data[data.index(b"\0") + 1 :]


def _head(repo: Path) -> str | None:
    """main's commit: its ref file, else its line in packed-refs (`git pack-refs`, `git gc`)."""
    ref = repo / BRANCH
    if ref.is_file():
        return ref.read_text().strip()
    packed = repo / "packed-refs"
    lines = packed.read_text().splitlines() if packed.is_file() else []
    return next((line.split()[0] for line in lines if line.endswith(f" {BRANCH}")), None)


def git_commit(repo: Path, value: str, when: int) -> None:
    """A commit of `homelab-sentinel.txt` (the value) on `main`, on top of the branch's last commit."""
    for folder in ("objects/info", "objects/pack", "refs/heads", "refs/tags"):
        (repo / folder).mkdir(parents=True, exist_ok=True)
    if not (repo / "HEAD").exists():
        (repo / "HEAD").write_text(f"ref: {BRANCH}\n")
        (repo / "config").write_text("[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = true\n")
    blob = _object(repo, "blob", f"{value}\n".encode())
    tree = _object(repo, "tree", f"100644 {FILE}\0".encode() + bytes.fromhex(blob))
    ref, last = repo / BRANCH, _head(repo)
    parent = f"parent {last}\n" if last else ""
    who = f"homelab <homelab@localhost> {when} +0000"
    commit = _object(
        repo, "commit", f"tree {tree}\n{parent}author {who}\ncommitter {who}\n\n{MESSAGE}{value}\n".encode()
    )
    tmp = ref.with_name("main.lock")  # git's own lock name: a git running meanwhile waits for it
    tmp.write_text(commit + "\n")
    tmp.replace(ref)


def git_read(repo: Path) -> str | None:
    """The value of the last commit on `main`, None when there is none (or it is not the sentinel's)."""
    last = _head(repo)
    try:
        commit = _read_object(repo, last).decode() if last else ""
    except (OSError, ValueError, zlib.error):
        return None  # packed by a `git gc` (or gone): not read here
    message = commit.split("\n\n", 1)[-1].strip()
    return message.removeprefix(MESSAGE) if message.startswith(MESSAGE) else None


def whisper_point(path: Path, when: int, value: float) -> None:
    """`value` at `when` (rounded down to its archive's step) into the finest archive of the metric's whisper
    file; made when missing (one archive: an hour a point, 400 days)."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        offset = _HEADER.size + _ARCHIVE.size
        head = _HEADER.pack(_AVERAGE, STEP * POINTS, 0.5, 1) + _ARCHIVE.pack(offset, STEP, POINTS)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_bytes(head + bytes(_POINT.size * POINTS))
        tmp.replace(path)
    with path.open("r+b") as f:
        offset, step, points = _archive(f.read(_HEADER.size + _ARCHIVE.size))  # the first, finest archive
        at = when - when % step
        f.seek(offset)
        base = _POINT.unpack(f.read(_POINT.size))[0]
        slot = 0 if base == 0 else (at - base) // step % points
        f.seek(offset + slot * _POINT.size)
        f.write(_POINT.pack(at, value))
        f.flush()
        os.fsync(f.fileno())


def whisper_read(path: Path, when: int) -> float | None:
    """The value stored for `when` (its hour), None when the file or the point is not there."""
    try:
        data = path.read_bytes()
        offset, step, points = _archive(data[: _HEADER.size + _ARCHIVE.size])
    except (OSError, struct.error):
        return None
    at = when - when % step
    for slot in range(points):
        stamp, value = _POINT.unpack_from(data, offset + slot * _POINT.size)
        if stamp == at:
            return float(value)
    return None


def _archive(head: bytes) -> tuple[int, int, int]:
    count = _HEADER.unpack_from(head)[3]
    if count < 1:
        raise struct.error("no archive")
    offset, step, points = _ARCHIVE.unpack_from(head, _HEADER.size)
    return int(offset), int(step), int(points)
