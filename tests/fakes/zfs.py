"""An in-memory ZFS behind homelab.runtime.zfs.Zfs that records every call.

It keeps pools, datasets, snapshots and clones, and answers as `zfs get -p` would (sizes in bytes,
mountpoints inherited from the parent, a source for each value). tests/storage/test_zfs_contract.py
checks these assumptions against the real tools (zfs-fuse).

Steer it with: `fail[method] = CommandFailed(...)` (that method raises), `busy` (names whose destroy
answers "busy"), `installed = False` (no zfs on PATH), `mount_root` (create mountpoint folders below
it, as a mount would, so code that chowns them can run in tmp_path; a mountpoint outside it fails).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Literal

from homelab.errors import CommandFailed
from homelab.runtime.zfs import Destroyed, Pool, Prop

# the VALUES column of OpenZFS 2.x's property table (what `zfs get` prints), for the properties homelab uses
OPENZFS_TABLE = {
    "compression": "on | off | lzjb | gzip | gzip-[1-9] | zle | lz4 | zstd | zstd-[1-19] | zstd-fast",
    "recordsize": "512 to 16M, power of 2",
    "xattr": "on | off | dir | sa",
    "acltype": "off | nfsv4 | posix | noacl | posixacl",
    "atime": "on | off",
    "logbias": "latency | throughput",
    "mountpoint": "<path> | legacy | none",
    "canmount": "on | off | noauto",
    "readonly": "on | off",
    "quota": "<size> | none",
    "refquota": "<size> | none",
    "casesensitivity": "sensitive | insensitive | mixed",
}
# zfs-fuse 0.7 (pool version 23): no lz4/zstd/sa/acltype, records up to 128K
ZFS_FUSE_TABLE = {
    **{k: v for k, v in OPENZFS_TABLE.items() if k != "acltype"},
    "compression": "on | off | lzjb | gzip | gzip-[1-9] | zle",
    "recordsize": "512 to 128k, power of 2",
    "xattr": "on | off",
}
OPENZFS_FEATURES = {
    "feature@lz4_compress": "active",
    "feature@large_blocks": "enabled",
    "feature@zstd_compress": "enabled",
}
DEFAULTS = {
    "compression": "off",
    "recordsize": str(128 << 10),
    "xattr": "on",
    "atime": "on",
    "logbias": "latency",
    "canmount": "on",
    "readonly": "off",
    "quota": "0",
    "refquota": "0",
    "acltype": "off",
    "casesensitivity": "sensitive",
}
NOT_INHERITED = frozenset({"quota", "refquota", "canmount", "casesensitivity"})
SIZES = frozenset({"recordsize", "quota", "refquota"})
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def _bytes(value: str) -> str:
    match = re.fullmatch(r"(\d+)([KMGT]?)", value.upper())
    return str(int(match.group(1)) * _UNITS[match.group(2)]) if match else value


def _fail(argv: list[str], stderr: str, code: int = 1) -> CommandFailed:
    return CommandFailed(["zfs", *argv], code, "", stderr)


class FakeZfs:
    def __init__(self, *, table: Mapping[str, str] | None = None, mount_root: Path | None = None) -> None:
        self.table = dict(table if table is not None else OPENZFS_TABLE)
        self.mount_root = mount_root
        self.installed = True
        self.calls: list[tuple[str, ...]] = []
        self.fail: dict[str, CommandFailed] = {}
        self.busy: set[str] = set()
        self.pool_props: dict[str, dict[str, str]] = {}
        self.health: dict[str, str] = {}
        self.local: dict[str, dict[str, str]] = {}  # dataset, clone or snapshot -> properties set on it
        self.origin: dict[str, str] = {}  # clone -> snapshot

    # --- set-up (not part of the driver) ---------------------------------------------------------

    def add_pool(
        self,
        name: str,
        mountpoint: str | Path | None = None,
        *,
        version: str = "-",
        features: Mapping[str, str] | None = None,
        health: str = "ONLINE",
    ) -> None:
        props = {"version": version, "health": health, **(OPENZFS_FEATURES if features is None else features)}
        self.pool_props[name] = props
        self.health[name] = health
        self.local[name] = {"mountpoint": str(mountpoint)} if mountpoint else {}
        self._mkdir(name)

    def _record(self, method: str, *args: str) -> None:
        self.calls.append((method, *args))
        if method in self.fail:
            raise self.fail[method]

    def changes(self) -> list[tuple[str, ...]]:
        """The recorded calls that change something."""
        changing = ("create", "set_property", "snapshot", "rollback", "clone", "destroy", "mount")
        return [c for c in self.calls if c[0] in changing]

    # --- what the driver answers -----------------------------------------------------------------

    def available(self) -> bool:
        self.calls.append(("available",))
        return self.installed

    def pools(self) -> list[Pool]:
        self._record("pools")
        return [Pool(name, health) for name, health in sorted(self.health.items())]

    def pool_properties(self, pool: str) -> dict[str, str]:
        self._record("pool_properties", pool)
        if pool not in self.pool_props:
            raise _fail(["get", "all", pool], f"cannot open '{pool}': no such pool")
        return dict(self.pool_props[pool])

    def property_table(self) -> dict[str, str]:
        self._record("property_table")
        return dict(self.table)

    def names(self, kind: Literal["filesystem", "snapshot"] | None = None) -> list[str]:
        self._record("names", *([kind] if kind else []))
        snapshot = kind == "snapshot"
        return sorted(n for n in self.local if ("@" in n) == snapshot)

    def exists(self, name: str) -> bool:
        self._record("exists", name)
        return name in self.local

    def _prop(self, name: str, prop: str) -> Prop:
        if prop in self.local[name]:
            return Prop(self.local[name][prop], "local")
        if prop == "origin":
            return Prop(self.origin.get(name, "-"), "-")
        parent = name.rpartition("/")[0] if "@" not in name else name.partition("@")[0]
        if prop == "mountpoint" and not parent:
            return Prop(f"/{name}", "default")
        if not parent or prop in NOT_INHERITED:
            return Prop(DEFAULTS.get(prop, "-"), "default")
        above = self._prop(parent, prop)
        source = above.source if above.source in ("default", "-") or above.source.startswith("inherited") else ""
        source = source or f"inherited from {parent}"
        if prop != "mountpoint":
            return above if above.source == "default" else Prop(above.value, source)
        leaf = name.rpartition("/")[2]
        return Prop(above.value if above.value in ("none", "legacy") else f"{above.value}/{leaf}", source)

    def get(self, name: str, prop: str) -> str:
        self._record("get", name, prop)
        if name not in self.local:
            raise _fail(["get", prop, name], f"cannot open '{name}': dataset does not exist")
        return self._prop(name, prop).value

    def properties(self, names: Iterable[str]) -> dict[str, dict[str, Prop]]:
        wanted = sorted(set(names))
        self._record("properties", *wanted)
        for name in wanted:
            if name not in self.local:
                raise _fail(["get", "all", name], f"cannot open '{name}': dataset does not exist")
        keys = sorted({*DEFAULTS, "mountpoint", "origin"})
        return {n: {k: self._prop(n, k) for k in keys} for n in wanted}

    def _check(self, argv: list[str], props: Mapping[str, str]) -> None:
        for key in props:
            if key not in self.table and ":" not in key:
                raise _fail(argv, f"cannot create '{argv[-1]}': invalid property '{key}'", 2)

    def create(self, name: str, properties: Mapping[str, str] | None = None) -> None:
        props = dict(properties or {})
        self._record("create", name, *(f"{k}={v}" for k, v in props.items()))
        argv = ["create", name]
        if name in self.local:
            raise _fail(argv, f"cannot create '{name}': dataset already exists")
        if name.rpartition("/")[0] not in self.local:
            raise _fail(argv, f"cannot create '{name}': parent does not exist")
        self._check(argv, props)
        self.local[name] = {k: _bytes(v) if k in SIZES else v for k, v in props.items()}
        self._mkdir(name)

    def set_property(self, name: str, prop: str, value: str) -> None:
        self._record("set_property", name, prop, value)
        if name not in self.local:
            raise _fail(["set", f"{prop}={value}", name], f"cannot open '{name}': dataset does not exist")
        self._check(["set", name], {prop: value})
        self.local[name][prop] = _bytes(value) if prop in SIZES else value

    def snapshot(self, dataset: str, name: str) -> str:
        full = f"{dataset}@{name}"
        self._record("snapshot", full)
        if dataset not in self.local:
            raise _fail(["snapshot", full], f"cannot open '{dataset}': dataset does not exist")
        if full in self.local:
            raise _fail(["snapshot", full], f"cannot create snapshot '{full}': dataset already exists")
        self.local[full] = {}
        return full

    def snapshots(self, dataset: str) -> list[str]:
        self._record("snapshots", dataset)
        return [n.split("@", 1)[1] for n in self.local if n.startswith(dataset + "@")]

    def rollback(self, snapshot: str) -> None:
        self._record("rollback", snapshot)
        dataset = snapshot.partition("@")[0]
        if snapshot not in self.local:
            raise _fail(["rollback", snapshot], f"cannot open '{snapshot}': dataset does not exist")
        newer = [n for n in self.local if n.startswith(dataset + "@")]
        if newer[-1] != snapshot:  # snapshots are kept in creation order
            raise _fail(["rollback", snapshot], f"cannot rollback to '{snapshot}': more recent snapshots exist")

    def clone(self, snapshot: str, name: str, properties: Mapping[str, str] | None = None) -> None:
        props = dict(properties or {})
        self._record("clone", snapshot, name, *(f"{k}={v}" for k, v in props.items()))
        if snapshot not in self.local:
            raise _fail(["clone", snapshot, name], f"cannot open '{snapshot}': dataset does not exist")
        self.create(name, props)
        self.calls.pop()  # the create above is part of this clone
        self.origin[name] = snapshot

    def origins(self, root: str) -> dict[str, str | None]:
        self._record("origins", root)
        if root not in self.local:
            raise _fail(["list", root], f"cannot open '{root}': dataset does not exist")
        below = [n for n in self.local if "@" not in n and (n == root or n.startswith(root + "/"))]
        return {n: self.origin.get(n) for n in sorted(below)}

    def destroy(self, name: str) -> Destroyed:
        self._record("destroy", name)
        if name not in self.local:
            raise _fail(["destroy", name], f"cannot open '{name}': dataset does not exist")
        if name in self.origin.values():
            return "has-clones"
        if name in self.busy:
            return "busy"
        if any(n.startswith(name + "/") or n.startswith(name + "@") for n in self.local):
            raise _fail(["destroy", name], f"cannot destroy '{name}': filesystem has children")
        del self.local[name]
        self.origin.pop(name, None)
        return "destroyed"

    def mounts(self) -> dict[str, str]:
        self._record("mounts")
        mounted = {}
        for name in sorted(self.local):
            where = self._prop(name, "mountpoint").value if "@" not in name else ""
            if where.startswith("/") and self._prop(name, "canmount").value == "on":
                mounted[name] = where
        return mounted

    def mount(self, name: str) -> None:
        self._record("mount", name)

    def _mkdir(self, name: str) -> None:
        where = self._prop(name, "mountpoint").value
        if self.mount_root is None or not where.startswith("/") or self._prop(name, "canmount").value != "on":
            return
        if not Path(where).is_relative_to(self.mount_root):
            raise AssertionError(f"{name} would be mounted at {where}, outside the test's {self.mount_root}")
        Path(where).mkdir(parents=True, exist_ok=True)
