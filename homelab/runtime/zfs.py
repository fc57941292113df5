"""The ZFS driver: every `zfs`/`zpool` call homelab makes goes through here (and through process.run).

Works with OpenZFS 2.x and with zfs-fuse (pool version 23), whose tools lack a few flags: `zpool get`
has no -H, `zfs list` has no -d. Each method says how it copes. Failures raise CommandFailed carrying
the program's output, except where a method documents an answer for them (exists, destroy).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterable, Mapping
from typing import Literal, NamedTuple, Protocol

from homelab.errors import CommandFailed
from homelab.runtime import process

ZFS, ZPOOL = "zfs", "zpool"  # the programs (also the name doctor gives its check)
READ_TIMEOUT = 60
CHANGE_TIMEOUT = 120

# what `destroy` found: gone, or refused because a reader holds it / a clone depends on it
Destroyed = Literal["destroyed", "busy", "has-clones"]


class Prop(NamedTuple):
    """One property of one dataset as `zfs get -p` reports it (sizes in bytes)."""

    value: str
    source: str  # local | default | inherited from <name> | temporary | received | -


class Pool(NamedTuple):
    name: str
    health: str  # ONLINE | DEGRADED | FAULTED | OFFLINE | UNAVAIL | REMOVED


class Zfs(Protocol):
    """What homelab asks of ZFS. `ZfsCli` talks to the real tools; tests use tests/fakes/zfs.FakeZfs."""

    def available(self) -> bool: ...
    def pools(self) -> list[Pool]: ...
    def pool_properties(self, pool: str) -> dict[str, str]: ...
    def property_table(self) -> dict[str, str]: ...
    def names(self, kind: Literal["filesystem", "snapshot"] | None = None) -> list[str]: ...
    def exists(self, name: str) -> bool: ...
    def get(self, name: str, prop: str) -> str: ...
    def properties(self, names: Iterable[str]) -> dict[str, dict[str, Prop]]: ...
    def create(self, name: str, properties: Mapping[str, str] | None = None) -> None: ...
    def set_property(self, name: str, prop: str, value: str) -> None: ...
    def snapshot(self, dataset: str, name: str) -> str: ...
    def snapshots(self, dataset: str) -> list[str]: ...
    def rollback(self, snapshot: str) -> None: ...
    def clone(self, snapshot: str, name: str, properties: Mapping[str, str] | None = None) -> None: ...
    def origins(self, root: str) -> dict[str, str | None]: ...
    def destroy(self, name: str) -> Destroyed: ...
    def mounts(self) -> dict[str, str]: ...
    def mount(self, name: str) -> None: ...


def _options(properties: Mapping[str, str] | None) -> list[str]:
    """`-o k=v` for each property, in the caller's order."""
    return [arg for key, value in (properties or {}).items() for arg in ("-o", f"{key}={value}")]


def parse_property_table(text: str) -> dict[str, str]:
    """property -> its VALUES column, from the table `zfs get` (no arguments) prints as its usage."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[1] in ("YES", "NO") and parts[2] in ("YES", "NO"):
            values[parts[0]] = " ".join(parts[3:])
    return values


class ZfsCli:
    """The `zfs` and `zpool` programs (found on PATH, or at the paths given)."""

    def __init__(self, zfs: str = ZFS, zpool: str = ZPOOL) -> None:
        self.zfs, self.zpool = zfs, zpool

    def _zfs(self, *args: str, check: bool = True, timeout: float = READ_TIMEOUT) -> subprocess.CompletedProcess[str]:
        return process.run([self.zfs, *args], check=check, timeout=timeout)

    # --- pools -----------------------------------------------------------------------------------

    def available(self) -> bool:
        return shutil.which(self.zfs) is not None

    def pools(self) -> list[Pool]:
        proc = process.run([self.zpool, "list", "-H", "-o", "name,health"], timeout=READ_TIMEOUT)
        return [Pool(*line.split("\t")[:2]) for line in proc.stdout.splitlines() if line.count("\t") >= 1]

    def pool_properties(self, pool: str) -> dict[str, str]:
        """Every property and feature@ flag of one pool (version is "-" on feature-flag pools)."""
        # no -H: zfs-fuse's zpool lacks it; columns are NAME PROPERTY VALUE SOURCE on both
        proc = process.run([self.zpool, "get", "all", pool], timeout=READ_TIMEOUT)
        return {
            parts[1]: parts[2].strip()
            for parts in (line.split() for line in proc.stdout.splitlines())
            if len(parts) >= 3 and parts[0] == pool
        }

    def property_table(self) -> dict[str, str]:
        """The properties this zfs tool knows, each with the values it accepts; empty if it printed none."""
        proc = self._zfs("get", check=False)  # the usage text (exit 2) holds the table
        return parse_property_table(proc.stderr + proc.stdout)

    # --- datasets --------------------------------------------------------------------------------

    def names(self, kind: Literal["filesystem", "snapshot"] | None = None) -> list[str]:
        """Every dataset name of every imported pool (filesystems and volumes unless a kind is given)."""
        args = ["list", "-H", "-o", "name"] + (["-t", kind] if kind else [])
        return self._zfs(*args).stdout.split()

    def exists(self, name: str) -> bool:
        return self._zfs("list", "-H", "-o", "name", name, check=False).returncode == 0

    def get(self, name: str, prop: str) -> str:
        return self._zfs("get", "-H", "-p", "-o", "value", prop, name).stdout.strip()

    def properties(self, names: Iterable[str]) -> dict[str, dict[str, Prop]]:
        """All properties of the named datasets, in one call; sizes in bytes."""
        wanted = sorted(set(names))
        if not wanted:
            return {}
        proc = self._zfs("get", "-H", "-p", "-o", "name,property,value,source", "all", *wanted)
        result: dict[str, dict[str, Prop]] = {n: {} for n in wanted}
        for line in proc.stdout.splitlines():
            parts = line.split("\t")
            if len(parts) == 4 and parts[0] in result:
                result[parts[0]][parts[1]] = Prop(parts[2], parts[3])
        return result

    def create(self, name: str, properties: Mapping[str, str] | None = None) -> None:
        self._zfs("create", *_options(properties), name, timeout=CHANGE_TIMEOUT)

    def set_property(self, name: str, prop: str, value: str) -> None:
        self._zfs("set", f"{prop}={value}", name, timeout=CHANGE_TIMEOUT)

    # --- snapshots and clones --------------------------------------------------------------------

    def snapshot(self, dataset: str, name: str) -> str:
        full = f"{dataset}@{name}"
        self._zfs("snapshot", full, timeout=CHANGE_TIMEOUT)
        return full

    def snapshots(self, dataset: str) -> list[str]:
        """Snapshot names (the part after @) of one dataset, oldest first."""
        proc = self._zfs("list", "-H", "-o", "name", "-t", "snapshot", "-r", "-d", "1", dataset, check=False)
        if proc.returncode != 0:  # zfs-fuse has no -d: list them all and keep this dataset's
            proc = self._zfs("list", "-H", "-o", "name", "-t", "snapshot", timeout=CHANGE_TIMEOUT)
        return [line.split("@", 1)[1] for line in proc.stdout.splitlines() if line.startswith(dataset + "@")]

    def rollback(self, snapshot: str) -> None:
        """Return a dataset to its most recent snapshot (no -r: never destroys newer snapshots)."""
        self._zfs("rollback", snapshot, timeout=CHANGE_TIMEOUT)

    def clone(self, snapshot: str, name: str, properties: Mapping[str, str] | None = None) -> None:
        self._zfs("clone", *_options(properties), snapshot, name, timeout=CHANGE_TIMEOUT)

    def origins(self, root: str) -> dict[str, str | None]:
        """root and every dataset below it -> the snapshot it was cloned from (None: not a clone)."""
        proc = self._zfs("list", "-H", "-o", "name,origin", "-r", root)
        result: dict[str, str | None] = {}
        for line in proc.stdout.splitlines():
            name, _, origin = line.partition("\t")
            result[name] = origin if origin not in ("", "-") else None
        return result

    def destroy(self, name: str) -> Destroyed:
        """Destroy one dataset, clone or snapshot (never recursively). "busy": a process holds it open
        (zfs-fuse also says so for a moment after the last reader closed); "has-clones": a clone
        depends on this snapshot. Nothing was destroyed in either case; other failures raise."""
        proc = self._zfs("destroy", name, check=False, timeout=CHANGE_TIMEOUT)
        if proc.returncode == 0:
            return "destroyed"
        if "dependent clones" in proc.stderr:
            return "has-clones"
        if "busy" in proc.stderr:
            return "busy"
        raise CommandFailed.from_process(proc, [])

    # --- mounts ----------------------------------------------------------------------------------

    def mounts(self) -> dict[str, str]:
        """Mounted ZFS filesystems -> where (`zfs mount` with no arguments)."""
        proc = self._zfs("mount")
        mounted: dict[str, str] = {}
        for line in proc.stdout.splitlines():
            name, _, where = line.strip().partition(" ")
            if name:
                mounted[name] = where.strip()
        return mounted

    def mount(self, name: str) -> None:
        self._zfs("mount", name, timeout=CHANGE_TIMEOUT)
