"""A recording stand-in for homelab.runtime.rclone.Rclone, for fast tests of the backup logic.

Each crypt remote `hl-<name>-crypt:` is a plain folder `<root>/<name>` (no encryption: what is tested here
is what homelab asks for and does with the answers; the real program is tested in tests/backup/). Objects
keep rclone's shapes: a symlink is `<name>.rclonelink` holding its target; sync moves what it replaces or
deletes under --backup-dir; cryptcheck compares content. `fail[verb]` makes the next call of that verb
return the given Result (and do nothing); `stop_sync_after = N` makes the next sync die (signal 9) after
writing N objects, as a sync killed midway; every call is recorded in `calls` as (verb, args...).
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path

from homelab.runtime.rclone import (
    LINK_SUFFIX,
    CheckResult,
    CopiedFn,
    ProgressFn,
    RcloneError,
    Result,
    Stats,
    encode_name,
)


class FakeRclone:
    def __init__(self, root: Path):
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)
        self.redactions: list[str] = []
        self.calls: list[tuple[object, ...]] = []
        self.fail: dict[str, Result] = {}
        self.stop_sync_after: int | None = None

    # --- helpers for tests ---
    def folder(self, path: str) -> Path:
        """The folder (or file) behind a crypt path `hl-<name>-crypt:some/path`."""
        remote, _, rel = path.partition(":")
        name = remote.removeprefix("hl-").removesuffix("-crypt")
        return self.root / name / rel if rel else self.root / name

    def verbs(self) -> list[object]:
        return [c[0] for c in self.calls]

    def _failed(self, verb: str) -> Result | None:
        return self.fail.pop(verb, None)

    # --- the driver ---
    def obscure(self, value: str) -> str:
        obscured = "obscured-" + value[::-1]
        self.redactions += [value, obscured]
        return obscured

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
        self.calls.append(("sync", str(source), dst, backup_dir))
        failed = self._failed("sync")
        if failed:
            return failed
        target, archive = self.folder(dst), self.folder(backup_dir)
        wanted = _left(_objects(source, local=True, follow=follow_links, prune=skip), skip)
        copied, written = [], 0
        stop, self.stop_sync_after = self.stop_sync_after, None
        for name, (data, mtime) in sorted(wanted.items()):
            have = target / name
            if have.is_file() and have.stat().st_size == len(data) and have.stat().st_mtime_ns == mtime:
                continue  # rclone's default: same size and mtime is the same file (crypt has no hash to compare)
            if stop is not None and len(copied) >= stop:  # killed: nothing deleted, no folder made
                return Result(False, -9, Stats(written, written, len(copied), len(wanted)), [], copied)
            if have.exists():
                _move(have, archive / name)
            _write(have, data, mtime)
            copied.append(name)
            written += len(data)
            if on_copied:
                on_copied(name)
        for name in sorted(set(_left(_objects(target), skip)) - set(wanted)):  # what a filter leaves out stays
            _move(target / name, archive / name)
        for folder in _left(dict.fromkeys(encode_name(f) for f in _folders(source, prune=skip)), skip):
            (target / folder).mkdir(parents=True, exist_ok=True)
        stats = Stats(written, written, len(copied), len(copied))
        if progress:
            progress(stats)
        return Result(True, 0, stats, [], copied)

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
        self.calls.append(("cryptcheck", str(source), dst, None if files is None else list(files)))
        out = CheckResult()
        # --files-from: only the folders holding a listed file are read
        only = (
            None if files is None else {"/".join(f.split("/")[:n]) for f in files for n in range(1, f.count("/") + 1)}
        )
        local = _left(_objects(source, local=True, follow=follow_links, prune=skip, only=only), skip)
        remote = _left(_objects(self.folder(dst)), skip)
        names = sorted(local if files is None else files)
        for name in names:
            if name not in local:
                out.errors.append(f"{name}: not in the source")
            elif name not in remote:
                out.missing.append(name)
            elif remote[name][0] != local[name][0]:
                out.differ.append(name)
            else:
                out.matched += 1
        if files is None:
            out.extra += sorted(set(remote) - set(local))
        return out

    def copy(self, src: str, to: Path, *, label: str, files: Sequence[str] | None = None, subpath: str = "") -> Result:
        self.calls.append(("copy", src, str(to), None if files is None else list(files), subpath))
        failed = self._failed("copy")
        if failed:
            return failed
        available = _objects(self.folder(src))
        sub = encode_name(subpath)
        if files is None:
            names = [n for n in available if not sub or _under(n, sub)]
            for folder in _folders(self.folder(src)):
                if not sub or _under(folder, sub):
                    (to / _decode(folder)).mkdir(parents=True, exist_ok=True)
        else:
            names = [n for n in files if n in available]
        for name in names:
            data, mtime = available[name]
            _restore(to, name, data, mtime)
        total = sum(len(available[n][0]) for n in names)
        return Result(True, 0, Stats(total, total, len(names), len(names)), [], list(names))

    def copyto(self, src: str, dst: str) -> None:
        self.calls.append(("copyto", src, dst))
        failed = self._failed("copyto")
        if failed:
            raise RcloneError(f"rclone copyto failed: {failed.errors}")
        origin = self.folder(src) if ":" in src else Path(src)
        target = self.folder(dst) if ":" in dst else Path(dst)
        if not origin.is_file():
            raise RcloneError(f"rclone copyto failed: {src}: object not found")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(origin, target)

    def list_files(self, path: str, *, recursive: bool = False) -> list[str]:
        self.calls.append(("list_files", path, recursive))
        folder = self.folder(path)
        if not folder.is_dir():
            return []
        if recursive:
            return sorted(_objects(folder))
        return sorted(p.name for p in folder.iterdir() if p.is_file())

    def list_objects(self, path: str) -> dict[str, tuple[int, int]]:
        self.calls.append(("list_objects", path))
        failed = self._failed("list_objects")
        if failed:
            raise RcloneError(f"rclone lsjson failed: {failed.errors}")
        return {name: (len(data), mtime) for name, (data, mtime) in _objects(self.folder(path)).items()}

    def list_dirs(self, path: str) -> list[str]:
        self.calls.append(("list_dirs", path))
        folder = self.folder(path)
        return sorted(p.name for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []

    def delete_files(self, path: str, names: Sequence[str], *, label: str) -> None:
        self.calls.append(("delete_files", path, list(names)))
        for name in names:
            (self.folder(path) / name).unlink(missing_ok=True)

    def move_files(self, src: str, dst: str, names: Sequence[str], *, label: str) -> None:
        self.calls.append(("move_files", src, dst, list(names)))
        for name in names:
            if (self.folder(src) / name).exists():
                _move(self.folder(src) / name, self.folder(dst) / name)

    def delete_matching(self, path: str, pattern: str) -> None:
        self.calls.append(("delete", path, pattern))
        for name in _objects(self.folder(path)):
            if fnmatch.fnmatchcase(name.rsplit("/", 1)[-1], pattern):
                (self.folder(path) / name).unlink()


def _under(name: str, subpath: str) -> bool:
    return name == subpath or name == subpath + LINK_SUFFIX or name.startswith(subpath + "/")


def _left(found: dict[str, object], skip: Sequence[str]) -> dict:
    """What rclone's filter rules `- /NAME` and `- /NAME/**` leave of a listing."""
    return {n: v for n, v in found.items() if not any(n == s or n.startswith(s + "/") for s in skip)}


def _objects(
    root: Path, local: bool = False, follow: bool = False, prune: Sequence[str] = (), only: set[str] | None = None
) -> dict[str, tuple[bytes, int]]:
    """rclone's view of a tree with --links: name -> (content, mtime_ns); a symlink is NAME.rclonelink (with
    --copy-links, `follow`: the file it points to). The remote's folders hold names as rclone spells them; a
    local tree's names are spelled so (encode_name). Folders a filter leaves out (`prune`), or not `only`
    those, are not read."""
    found: dict[str, tuple[bytes, int]] = {}
    if not root.is_dir():
        return found
    for folder, dirs, files in _walk(root, prune, only):
        base = Path(folder)
        for name in files + [d for d in dirs if (base / d).is_symlink()]:
            path = base / name
            rel = str(path.relative_to(root))
            rel = encode_name(rel) if local else rel
            st = path.stat() if follow else path.lstat()
            if follow and path.is_file():
                found[rel] = (path.read_bytes(), st.st_mtime_ns)
            elif path.is_symlink():
                found[rel + LINK_SUFFIX] = (os.fsencode(os.readlink(path)), st.st_mtime_ns)
            elif stat.S_ISREG(st.st_mode):  # rclone skips sockets, FIFOs and devices ("can't transfer")
                found[rel] = (path.read_bytes(), st.st_mtime_ns)
    return found


def _walk(root: Path, prune: Sequence[str], only: set[str] | None = None) -> Iterator[tuple[str, list[str], list[str]]]:
    """os.walk, not entering a folder rclone's filter `- /NAME/**` leaves out (as rclone does not list it),
    nor, given `only`, one not in it."""
    left_out = set(prune)
    for folder, dirs, files in os.walk(root):
        rel = os.path.relpath(folder, root)
        names = {d: encode_name(d if rel == "." else f"{rel}/{d}") for d in dirs}
        dirs[:] = [
            d
            for d in dirs
            if names[d] not in left_out and (only is None or names[d] in only or Path(folder, d).is_symlink())
        ]
        yield folder, dirs, files


def _folders(root: Path, prune: Sequence[str] = ()) -> list[str]:
    out = []
    for folder, dirs, _ in _walk(root, prune):
        base = Path(folder)
        out += [str((base / d).relative_to(root)) for d in dirs if not (base / d).is_symlink()]
    return out


def _write(path: Path, data: bytes, mtime: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    os.utime(path, ns=(mtime, mtime))


def _move(path: Path, to: Path) -> None:
    to.parent.mkdir(parents=True, exist_ok=True)
    path.replace(to)


def _decode(name: str) -> str:
    """The local name of an object rclone spells `name` (the inverse of encode_name)."""
    controls = {encode_name(chr(c)): chr(c) for c in [*range(1, 0x20), 0x7F]}
    out, quoted = [], False
    for c in name:
        if c == "\u201b" and not quoted:
            quoted = True
            continue
        out.append(c if quoted else controls.get(c, c))
        quoted = False
    return "".join(out)


def _restore(to: Path, encoded: str, data: bytes, mtime: int) -> None:
    name = _decode(encoded)
    if name.endswith(LINK_SUFFIX):
        link = to / name.removesuffix(LINK_SUFFIX)
        link.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(os.fsdecode(data), link)
        return
    _write(to / name, data, mtime)
