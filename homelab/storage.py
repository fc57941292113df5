"""ZFS datasets for the apps: ask the pool what it supports, plan, then apply without ever destroying.

The Plan says what each dataset wants (recordsize 1M for media, 16K + logbias=throughput for Postgres,
lz4, atime=off, xattr=sa + acltype=posix). The pool may not support all of it: zfs-fuse is pool version
23 (no lz4/zstd, records of at most 128K, xattr on|off, no acltype); OpenZFS 2.x has everything but a
pool may lack a feature. `probe()` reads both the zfs tool's own property table (`zfs get` prints it)
and the pool's version/features, and `plan_storage()` falls back with a warning for each property.

`apply_storage()` creates missing datasets, sets properties that differ, chowns mountpoints, creates
`edge/acme`'s acme.json as a 0600 regular file (engine/host.py), and reports each step. It never destroys a dataset,
never lowers a quota below what is used, and leaves create-time-only properties alone (with a warning).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from homelab.engine.host import ACME_MODE, HostError, acme_json_of, acme_state, ensure_acme_json
from homelab.errors import CommandFailed, HomelabError
from homelab.plan_model import Dataset, Plan
from homelab.runtime.zfs import Prop, Zfs, ZfsCli

# properties only settable when the dataset is created
CREATE_ONLY = frozenset({"casesensitivity", "normalization", "utf8only", "encryption", "volblocksize"})
# properties whose lowering could cut off data already there
NEVER_SHRINK = frozenset({"quota", "refquota"})
COMPRESSION_PREFERENCE = ("zstd", "lz4", "on")  # "on" = lzjb on old pools, lz4 on new ones
_SIZE_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*([KMGTPE]?)i?B?$", re.IGNORECASE)
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40, "P": 1 << 50, "E": 1 << 60}


class StorageError(HomelabError):
    """ZFS is missing, the pool is absent, or a step failed."""


def parse_size(text: str) -> int:
    match = _SIZE_RE.match(text.strip())
    if not match:
        raise ValueError(f"not a size: {text!r}")
    return int(float(match.group(1)) * _UNITS[match.group(2).upper()])


def format_size(n: int) -> str:
    for unit in ("E", "P", "T", "G", "M", "K"):
        if n >= _UNITS[unit] and n % _UNITS[unit] == 0:
            return f"{n // _UNITS[unit]}{unit}"
    return str(n)


# --- what the pool supports -------------------------------------------------------------------


@dataclass(frozen=True)
class PoolSupport:
    """What this zfs tool and this pool accept. Built by probe(); tests may build one by hand."""

    pool: str
    version: str  # "23" for zfs-fuse, "5000"/"-" for feature-flag pools
    values: dict[str, str]  # property -> VALUES column of the tool's table ("on | off | lzjb ...")
    features: dict[str, str] = field(default_factory=dict)  # feature@x -> enabled|active|disabled
    max_recordsize: int = 128 << 10

    @property
    def feature_flags(self) -> bool:
        return self.version in ("-", "5000")

    def supports_property(self, name: str) -> bool:
        return name in self.values or ":" in name

    def _feature(self, name: str) -> bool:
        return self.feature_flags and self.features.get(f"feature@{name}", "disabled") in ("enabled", "active")

    def supports_value(self, name: str, value: str) -> bool:
        if not self.supports_property(name):
            return False
        if name == "recordsize":
            try:
                return parse_size(value) <= self.max_recordsize
            except ValueError:
                return False
        if name == "compression":
            base = value.split("-")[0]
            if base == "lz4" and not self._feature("lz4_compress"):
                return False
            if base == "zstd" and not self._feature("zstd_compress"):
                return False
        choices = self.values.get(name, "")
        if "|" not in choices:
            return True  # free-form (<size>, <path>...)
        for choice in (c.strip() for c in choices.split("|")):
            if choice.startswith("<"):
                return True  # <size> | none
            pattern = r"\d+".join(re.escape(part) for part in re.split(r"\[[0-9-]+\]", choice))  # gzip-[1-9]
            if re.fullmatch(pattern, value):
                return True
        return False


def _max_recordsize(values: dict[str, str], large_blocks: bool) -> int:
    match = re.search(r"to\s+(\d+[kKmM])", values.get("recordsize", ""))
    tool_max = parse_size(match.group(1)) if match else 128 << 10
    return tool_max if large_blocks else min(tool_max, 128 << 10)


def probe(pool: str, zfs: Zfs | None = None) -> PoolSupport:
    """Ask the zfs tool and the pool what they support."""
    zfs = zfs or ZfsCli()
    try:
        pool_props = zfs.pool_properties(pool)
    except CommandFailed as exc:
        detail = (exc.stderr or exc.stdout).strip().splitlines()
        raise StorageError(f"pool {pool!r} is not available: {detail[0] if detail else 'zpool get failed'}") from None
    version = pool_props.get("version", "-")
    features = {k: v for k, v in pool_props.items() if k.startswith("feature@")}
    values = zfs.property_table()
    if not values:
        raise StorageError("could not read the zfs property table (`zfs get` printed none)")
    large = features.get("feature@large_blocks", "disabled") in ("enabled", "active")
    return PoolSupport(pool, version, values, features, _max_recordsize(values, large))


def fit(wanted: dict[str, str], support: PoolSupport) -> tuple[dict[str, str], list[str]]:
    """The properties this pool can take, and a warning for each fallback."""
    result: dict[str, str] = {}
    warnings: list[str] = []
    for name, value in wanted.items():
        if name == "compression" and not support.supports_value(name, value):
            order = list(COMPRESSION_PREFERENCE)
            start = order.index(value) + 1 if value in order else 0
            fallback = next((c for c in order[start:] if support.supports_value(name, c)), None)
            if fallback:
                result[name] = fallback
                warnings.append(f"compression={value} not supported by pool {support.pool}; using {fallback}")
            else:
                warnings.append(f"compression={value} not supported by pool {support.pool}; left unset")
        elif name == "recordsize" and support.supports_property(name) and not support.supports_value(name, value):
            cap = format_size(support.max_recordsize)
            result[name] = cap
            warnings.append(f"recordsize={value} above this pool's maximum; using {cap}")
        elif name == "xattr" and value == "sa" and not support.supports_value(name, value):
            result[name] = "on"
            warnings.append(f"xattr=sa not supported by pool {support.pool}; using xattr=on (directory xattrs)")
        elif not support.supports_property(name):
            warnings.append(f"{name} is not a property this zfs knows; skipped")
        elif not support.supports_value(name, value):
            warnings.append(f"{name}={value} not supported by pool {support.pool}; skipped")
        else:
            result[name] = value
    return result, warnings


# --- planning ----------------------------------------------------------------------------------

StepAction = Literal["create", "set", "chown", "acme", "ok", "warn"]
CHANGES = ("create", "set", "chown", "acme")


@dataclass
class Step:
    action: StepAction
    target: str
    detail: str = ""
    properties: dict[str, str] = field(default_factory=dict)  # create: its -o options, in order; set: the one

    def __str__(self) -> str:
        return f"{self.action:6} {self.target}" + (f": {self.detail}" if self.detail else "")


@dataclass
class StoragePlan:
    support: PoolSupport
    steps: list[Step]
    warnings: list[str]

    @property
    def changes(self) -> list[Step]:
        return [s for s in self.steps if s.action in CHANGES]


@dataclass
class _Planner:
    """Steps and warnings as they are decided; a pool-wide fallback is shown once, at the first dataset it
    affects (and listed in warnings for every one)."""

    steps: list[Step] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    said: set[str] = field(default_factory=set)

    def warn(self, target: str, text: str) -> None:
        self.warnings.append(f"{target}: {text}")
        if text not in self.said:
            self.steps.append(Step("warn", target, text))
        self.said.add(text)


def _existing(zfs: Zfs, names: Iterable[str]) -> dict[str, dict[str, Prop]]:
    """Current properties of the datasets that exist, fetched in one call."""
    names = list(names)
    if not names:
        return {}
    try:
        present = set(zfs.names("filesystem")) & set(names)
    except CommandFailed:
        return {}
    return zfs.properties(present) if present else {}


def _same(name: str, current: str, wanted: str) -> bool:
    if current == wanted:
        return True
    if name in ("recordsize", "quota", "refquota", "reservation", "refreservation"):
        try:
            return parse_size(current) == parse_size(wanted)
        except ValueError:
            return False
    return False


def _parents(plan: Plan) -> list[str]:
    root = plan.config.storage.root
    names: list[str] = []
    for d in plan.datasets:
        parts = d.name.split("/")
        for i in range(1, len(parts)):
            parent = "/".join(parts[:i])
            if parent not in names and (parent == root or parent.startswith(root + "/")):
                names.append(parent)
    if root not in names and root != plan.config.storage.pool:
        names.insert(0, root)
    return sorted(names, key=lambda n: n.count("/"))


def plan_storage(plan: Plan, support: PoolSupport | None = None, zfs: Zfs | None = None) -> StoragePlan:
    """What apply would do; no changes made. Reads the pool."""
    zfs = zfs or ZfsCli()
    support = support or probe(plan.config.storage.pool, zfs)
    parents = _parents(plan)
    current = _existing(zfs, [*parents, *(d.name for d in plan.datasets)])
    planner = _Planner()
    _plan_parents(plan, parents, current, support, planner)
    for d in plan.datasets:
        wanted, fit_warnings = fit(d.properties, support)
        for text in fit_warnings:
            planner.warn(d.name, text)
        if d.name not in current:
            options = dict(sorted(wanted.items()))
            if not d.name.startswith(plan.config.storage.root + "/"):
                options["mountpoint"] = d.path
            planner.steps.append(Step("create", d.name, _describe(wanted, None), options))
        else:
            _plan_properties(d, wanted, current[d.name], planner)
        planner.steps += _ownership_steps(d, exists=d.name in current)
    return StoragePlan(support, planner.steps, planner.warnings)


def _plan_parents(
    plan: Plan, parents: list[str], current: dict[str, dict[str, Prop]], support: PoolSupport, planner: _Planner
) -> None:
    """The root and owner folders: the root carries the pool-wide defaults every app dataset inherits."""
    storage = plan.config.storage
    base, base_warnings = fit({"atime": "off", "compression": "lz4", "xattr": "sa", "acltype": "posix"}, support)
    for text in base_warnings:
        planner.warn(storage.root, text)
    for name in parents:
        if name in current:
            planner.steps.append(Step("ok", name, "exists"))
            continue
        is_root = name == storage.root
        options = {"mountpoint": storage.mountpoint, **dict(sorted(base.items()))} if is_root else {}
        detail = _describe(base if is_root else {}, storage.mountpoint if is_root else None)
        planner.steps.append(Step("create", name, detail, options))


def _plan_properties(d: Dataset, wanted: dict[str, str], have: dict[str, Prop], planner: _Planner) -> None:
    """An existing dataset: set what differs, except what could only be set at creation or would shrink."""
    mounted_at = have.get("mountpoint", Prop("", "")).value
    if mounted_at and mounted_at != d.path:
        planner.warn(
            d.name, f"mounted at {mounted_at}, the plan expects {d.path}; not changed (bind mounts use {d.path})"
        )
    changed = False
    for prop, value in sorted(wanted.items()):
        old = have.get(prop, Prop("-", "")).value
        if _same(prop, old, value):
            continue
        changed = True
        if prop in CREATE_ONLY:
            planner.warn(d.name, f"{prop} is {old}, wanted {value}: only settable at creation; left as is")
        elif prop in NEVER_SHRINK and old not in ("0", "none", "-") and _smaller(value, old):
            planner.warn(
                d.name,
                f"{prop} would shrink from {format_size(int(old)) if old.isdigit() else old} to "
                f"{value}; apply never shrinks (run zfs set yourself if you mean it)",
            )
        else:
            note = " (applies to files written from now on)" if prop == "recordsize" else ""
            planner.steps.append(Step("set", d.name, f"{prop} {_show(prop, old)} -> {value}{note}", {prop: value}))
    if not changed:
        planner.steps.append(Step("ok", d.name, "properties as planned"))


def _smaller(new: str, old: str) -> bool:
    if new == "none":
        return False
    try:
        return parse_size(new) < parse_size(old)
    except ValueError:
        return False


def _show(prop: str, value: str) -> str:
    if prop == "recordsize" and value.isdigit():
        return format_size(int(value))
    return value


def _describe(props: dict[str, str], mountpoint: str | None) -> str:
    parts = [f"{k}={v}" for k, v in sorted(props.items())]
    if mountpoint:
        parts.insert(0, f"mountpoint={mountpoint}")
    return " ".join(parts)


def _ownership_steps(d: Dataset, *, exists: bool) -> list[Step]:
    steps: list[Step] = []
    path = Path(d.path)
    if not exists or not path.exists():
        steps.append(Step("chown", d.path, f"{d.uid}:{d.gid}"))
    else:
        info = path.stat()
        if (info.st_uid, info.st_gid) != (d.uid, d.gid):
            steps.append(Step("chown", d.path, f"{info.st_uid}:{info.st_gid} -> {d.uid}:{d.gid}"))
    return steps + _acme_steps(d)


def _acme_steps(d: Dataset) -> list[Step]:
    """The dataset holding acme.json: the file must be there, a regular file, 0600, before the edge starts."""
    acme_json = acme_json_of(d)
    if acme_json is None:
        return []
    acme = acme_state(acme_json)
    if acme.kind == "missing":
        return [Step("acme", str(acme.path), "create empty, mode 0600")]
    if acme.kind == "not-a-file":
        return [
            Step(
                "warn",
                str(acme.path),
                "is not a regular file (Docker creates a directory for a missing "
                "bind source); remove it and run apply again",
            )
        ]
    if acme.mode != ACME_MODE:
        return [Step("acme", str(acme.path), f"mode {acme.mode:04o} -> 0600")]
    return []


# --- applying ----------------------------------------------------------------------------------


def apply_storage(
    plan: Plan,
    storage_plan: StoragePlan | None = None,
    report: Callable[[Step], None] | None = None,
    zfs: Zfs | None = None,
) -> StoragePlan:
    """Carry out the plan step by step, reporting each; stop at the first failure (StorageError)."""
    zfs = zfs or ZfsCli()
    storage_plan = storage_plan or plan_storage(plan, zfs=zfs)
    by_path = {d.path: d for d in plan.datasets}
    for step in storage_plan.steps:
        try:
            _carry_out(step, zfs, by_path)
        except (CommandFailed, HostError) as exc:
            raise StorageError(f"{step.action} {step.target} failed: {exc}") from None
        except OSError as exc:
            raise StorageError(f"{step.action} {step.target} failed: {exc.strerror} ({exc.filename})") from None
        if report:
            report(step)
    return storage_plan


def _carry_out(step: Step, zfs: Zfs, by_path: dict[str, Dataset]) -> None:
    if step.action == "create":
        zfs.create(step.target, step.properties)
    elif step.action == "set":
        for prop, value in step.properties.items():
            zfs.set_property(step.target, prop, value)
    elif step.action == "chown":
        d = by_path[step.target]
        os.chown(step.target, d.uid, d.gid)
    elif step.action == "acme":
        ensure_acme_json(Path(step.target))
