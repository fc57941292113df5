"""A rollback's data step: put a dataset's files back to an upgrade snapshot without destroying anything.

`zfs rollback` can only return to a dataset's newest snapshot and, with -r, destroys every newer one (a
backup's, a later upgrade's, the safety snapshot just taken). So the snapshot is read through a clone
(homelab.backup.snapshots.Snapshots, as backups read theirs: zfs-fuse has no .zfs/snapshot) and the live
dataset is made equal to it, file by file: what the snapshot lacks is removed, what differs is copied back,
owners, modes and modification times are set as the snapshot has them. Every newer snapshot stays.

A file whose size and modification time (to the nanosecond) are the snapshot's is taken as unchanged
(rsync's rule); only the others are copied. Hard links are copied as separate files; extended attributes
and ACLs are not carried (the catalog's apps keep none in their data).

Before that, `changes` says what a rollback would throw away (bytes of files added or changed since the
snapshot, files removed; for Postgres, whether a pg_dump now differs from the one the snapshot holds), so
homelab can ask first, and a safety snapshot keeps it: the current state (`@homelab-safety-<stack>-<stamp>`),
never destroyed by homelab. `keeps_data` says where `rollback --keep-data` (old images, data as it is) works.
"""

from __future__ import annotations

import os
import shutil
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from homelab.backup.snapshots import Snapshots
from homelab.engine.model import StackPlan
from homelab.errors import CommandFailed, HomelabError
from homelab.runtime.docker import Engine
from homelab.runtime.zfs import Zfs
from homelab.upgrade.journal import DUMP_FILE, RECORDS_DIR, Dump, Record, UpgradeRefused

SAFETY_PREFIX = "homelab-safety-"
MARGIN = 16 << 20  # bytes free left over after a put-back (metadata, the stopped app's logs)


@dataclass
class Changes:
    """How a dataset's live files differ from a snapshot's."""

    dataset: str
    written: int = 0  # bytes of the live files added or changed since the snapshot
    files: int = 0  # files added or changed
    restore: int = 0  # bytes of the snapshot's files a put-back writes again (needs that much room)
    removed: int = 0  # files or folders (each one under a lost folder too) the snapshot has and the live lost

    @property
    def any(self) -> bool:
        return bool(self.files or self.removed)

    def describe(self) -> str:
        return f"{self.dataset}: {self.written} bytes in {self.files} files written, {self.removed} removed"


@dataclass(frozen=True)
class Loss:
    """What a rollback would discard: per dataset, and whether each Postgres database changed."""

    datasets: list[Changes]
    databases: list[str]  # one sentence per server
    changed: bool

    def describe(self) -> str:
        return "\n".join(["  " + c.describe() for c in self.datasets] + ["  " + d for d in self.databases])


def measure(record: Record, out: Path, docker: Engine, zfs: Zfs, found: list[Changes]) -> Loss:
    """What putting the data back would discard (`found`: its datasets' changes), asked while the stack runs."""
    base = out / RECORDS_DIR / record.folder_name / "read"
    databases = [_database(record, out, docker, zfs, d, base) for d in record.databases]
    changed = any(c.any for c in found) or any(" changed " in d for d in databases)
    return Loss(found, databases, changed)


def _database(record: Record, out: Path, docker: Engine, zfs: Zfs, dump: Dump, base: Path) -> str:
    """Whether a Postgres database changed since the upgrade: a pg_dump now against the one the snapshot holds."""
    stack = StackPlan(record.stack, out / record.stack)
    dataset = next((n for n in record.datasets if zfs.get(n, "mountpoint") == dump.folder), None)
    running = {c.service for c in docker.containers([stack.project]) if c.running}
    if dataset is None or dump.service not in running:
        return (
            f"{dump.service}: could not tell whether database {dump.database} changed ({dump.service} is not running)"
        )
    now = out / RECORDS_DIR / record.folder_name / f"{dump.service}-now.sql"
    argv = ["pg_dump", "--username", dump.user, "--dbname", dump.database, "--no-password"]
    try:
        docker.exec_to_file(stack.project, stack.directory, dump.service, argv, now, timeout=3600)
        with snapshot_folder(zfs, dataset, record.snapshot or "", base) as old:
            same = (old / DUMP_FILE).read_bytes() == now.read_bytes()
    except (CommandFailed, OSError) as exc:
        return f"{dump.service}: could not tell whether database {dump.database} changed ({exc})"
    finally:
        now.unlink(missing_ok=True)
    return f"{dump.service}: database {dump.database} " + ("is unchanged" if same else "has changed since the upgrade")


def room(zfs: Zfs, found: list[Changes]) -> list[str]:
    """Datasets without the free space to take their files back (the safety snapshot keeps the current
    blocks, so the snapshot's versions are written anew)."""
    short = []
    for c in found:
        free = zfs.get(c.dataset, "available")
        if c.any and free.isdigit() and int(free) < c.restore + MARGIN:
            need, has = (c.restore + MARGIN) >> 20, int(free) >> 20
            short.append(f"{c.dataset} needs {need} MiB free to take its files back, has {has} MiB")
    return short


def live_folder(zfs: Zfs, dataset: str) -> Path:
    where = zfs.get(dataset, "mountpoint")
    if not where.startswith("/") or not Path(where).is_dir():
        raise HomelabError(f"{dataset} is not mounted (mountpoint {where!r}): its files cannot be put back")
    return Path(where)


@contextmanager
def snapshot_folder(zfs: Zfs, dataset: str, snapshot: str, base: Path) -> Iterator[Path]:
    """The snapshot's files, read-only, through a clone destroyed afterwards."""
    base.mkdir(mode=0o700, parents=True, exist_ok=True)
    with Snapshots(zfs).open(dataset, snapshot, base) as folder:
        yield folder


def changes(zfs: Zfs, dataset: str, snapshot: str, base: Path) -> Changes:
    """What putting `dataset` back to `snapshot` would discard (nothing is changed)."""
    with snapshot_folder(zfs, dataset, snapshot, base) as old:
        return _sync(old, live_folder(zfs, dataset), Changes(dataset), apply=False)


def put_back(zfs: Zfs, dataset: str, snapshot: str, base: Path) -> Changes:
    """Make the live dataset's files equal the snapshot's; returns what was discarded."""
    with snapshot_folder(zfs, dataset, snapshot, base) as old:
        return _sync(old, live_folder(zfs, dataset), Changes(dataset), apply=True)


def safety_name(stack: str) -> str:
    return f"{SAFETY_PREFIX}{stack}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"


def _kind(mode: int) -> int:
    return stat.S_IFMT(mode)


def _sync(old: Path, live: Path, tally: Changes, *, apply: bool) -> Changes:
    """Walk both trees; count (and, with apply, undo) every difference of `live` from `old`."""
    olds = {e.name: e.stat(follow_symlinks=False) for e in os.scandir(old)}
    lives = {e.name: e.stat(follow_symlinks=False) for e in os.scandir(live)}
    kept = _written(old, live, olds, lives, tally, apply=apply)
    for name, was in olds.items():
        src, dst, now = old / name, live / name, kept.get(name)
        if name not in lives:
            tally.removed += 1
        if stat.S_ISDIR(was.st_mode):
            if apply and now is None:
                dst.mkdir()
            if now is not None or apply:
                _sync(src, dst, tally, apply=apply)
            else:  # what a put-back would make again inside it
                for root, dirs, files in os.walk(src):
                    tally.removed += len(dirs) + len(files)
                    tally.restore += sum((Path(root) / f).lstat().st_size for f in files)
            continue
        if stat.S_ISREG(was.st_mode) and (
            now is None or (now.st_size, now.st_mtime_ns) != (was.st_size, was.st_mtime_ns)
        ):
            tally.restore += was.st_size
        if apply:
            _copy(src, dst, was, now)
            _metadata(dst, was)
    if apply:
        _metadata(live, old.stat(follow_symlinks=False))
    return tally


def _written(
    old: Path,
    live: Path,
    olds: dict[str, os.stat_result],
    lives: dict[str, os.stat_result],
    tally: Changes,
    *,
    apply: bool,
) -> dict[str, os.stat_result]:
    """The live entries of one folder that are new or changed, counted; with apply, those the snapshot
    lacks (or has as another kind) removed. Returns the live entries that stay."""
    kept = {}
    for name, st in lives.items():
        was = olds.get(name)
        if was is None or _kind(was.st_mode) != _kind(st.st_mode):
            _count_new(live / name, st, tally)
            tally.removed += was is not None
            if apply:
                _remove(live / name, st)
            continue
        kept[name] = st
        if stat.S_ISREG(st.st_mode) and (st.st_size, st.st_mtime_ns) != (was.st_size, was.st_mtime_ns):
            tally.files += 1
            tally.written += st.st_size
        elif stat.S_ISLNK(st.st_mode) and (live / name).readlink() != (old / name).readlink():
            tally.files += 1
    return kept


def _count_new(path: Path, st: os.stat_result, tally: Changes) -> None:
    """A file or tree the snapshot does not have: all of it was written since."""
    if stat.S_ISDIR(st.st_mode):
        for root, _dirs, files in os.walk(path):
            for f in files:
                tally.files += 1
                tally.written += (Path(root) / f).lstat().st_size
    else:
        tally.files += 1
        tally.written += st.st_size if stat.S_ISREG(st.st_mode) else 0


def _remove(path: Path, st: os.stat_result) -> None:
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(path)
    else:
        path.unlink()


def _copy(src: Path, dst: Path, was: os.stat_result, now: os.stat_result | None) -> None:
    if stat.S_ISREG(was.st_mode):
        if now is None or (now.st_size, now.st_mtime_ns) != (was.st_size, was.st_mtime_ns):
            shutil.copyfile(src, dst, follow_symlinks=False)
    elif stat.S_ISLNK(was.st_mode):
        target = src.readlink()
        if now is not None and dst.readlink() != target:
            dst.unlink()
            now = None
        if now is None:
            dst.symlink_to(target)
    elif now is None:  # a fifo, socket or device node: made again, empty as they are
        os.mknod(dst, was.st_mode, was.st_rdev)


def _metadata(path: Path, was: os.stat_result) -> None:
    os.chown(path, was.st_uid, was.st_gid, follow_symlinks=False)
    if not stat.S_ISLNK(was.st_mode):
        path.chmod(stat.S_IMODE(was.st_mode))
    os.utime(path, ns=(was.st_atime_ns, was.st_mtime_ns), follow_symlinks=False)


# image (without registry, tag) -> why its older version cannot run on the newer one's data; an image not
# named here is taken to read its data the same in both versions (docs/upgrades.md, --keep-data)
NO_KEEP_DATA = {
    "nextcloud": "Nextcloud refuses to start on data of a newer version (downgrading is not supported)",
    "gitea": "Gitea refuses a database a newer version migrated",
    "jenkins": "Jenkins may not read plugin and job files a newer version wrote",
    "plex": "Plex's databases are migrated by a newer version and not migrated back",
    "grafana": "Grafana's database is migrated by a newer version",
    "redis": "an older Redis cannot load a newer RDB format",
}


def keeps_data(record: Record) -> None:
    """Refuse --keep-data where an older image cannot run on its newer version's data; Postgres only within
    a major version (an older major refuses the data directory)."""
    for change in record.changes:
        name = change.old.rpartition("/")[2].partition(":")[0].partition("@")[0]
        why = NO_KEEP_DATA.get(name)
        if name == "postgres" and _major(change.old) != _major(change.new):
            why = "PostgreSQL refuses a data directory of another major version"
        if why:
            raise UpgradeRefused(f"{record.stack}: --keep-data is not possible for {change.service}: {why}")


def _major(image: str) -> str:
    return image.rpartition(":")[2].partition(".")[0].partition("-")[0]
