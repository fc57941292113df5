"""ZFS datasets for the apps: ask the pool what it supports, plan, then apply without ever destroying.

The Plan says what each dataset wants (recordsize 1M for media, 16K + logbias=throughput for Postgres,
lz4, atime=off, xattr=sa + acltype=posix). The pool may not support all of it: zfs-fuse is pool version
23 (no lz4/zstd, records of at most 128K, xattr on|off, no acltype); OpenZFS 2.x has everything but a
pool may lack a feature. `probe()` reads both the zfs tool's own property table (`zfs get` prints it)
and the pool's version/features, and `plan_storage()` falls back with a warning for each property.

`apply_storage()` creates missing datasets, sets properties that differ, chowns mountpoints, creates
`edge/acme`'s acme.json as a 0600 regular file, and reports each step. It never destroys a dataset,
never lowers a quota below what is used, and leaves create-time-only properties alone (with a warning).
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from homelab.errors import CommandFailed, HomelabError
from homelab.plan import Dataset, Plan
from homelab.runtime import process

ACME_KEY = "edge/acme"
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


def _property_table(text: str) -> dict[str, str]:
    values: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[1] in ("YES", "NO") and parts[2] in ("YES", "NO"):
            values[parts[0]] = " ".join(parts[3:])
    return values


def _max_recordsize(values: dict[str, str], large_blocks: bool) -> int:
    match = re.search(r"to\s+(\d+[kKmM])", values.get("recordsize", ""))
    tool_max = parse_size(match.group(1)) if match else 128 << 10
    return tool_max if large_blocks else min(tool_max, 128 << 10)


def probe(pool: str) -> PoolSupport:
    """Ask the zfs tool and the pool what they support."""
    # no -H: zfs-fuse's zpool lacks it; columns are NAME PROPERTY VALUE SOURCE on both
    proc = process.run(["zpool", "get", "all", pool], check=False, timeout=60)
    if proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip().splitlines()
        raise StorageError(f"pool {pool!r} is not available: {detail[0] if detail else 'zpool get failed'}")
    pool_props = {
        parts[1]: parts[2]
        for parts in (line.split() for line in proc.stdout.splitlines())
        if len(parts) >= 3 and parts[0] == pool
    }
    version = pool_props.get("version", "-").strip()
    features = {k: v.strip() for k, v in pool_props.items() if k.startswith("feature@")}
    table = process.run(["zfs", "get"], check=False, timeout=60)  # prints the property table
    values = _property_table(table.stderr + table.stdout)
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


@dataclass
class Step:
    action: str  # create | set | chown | acme | ok | warn | skip
    target: str
    detail: str = ""
    argv: list[str] | None = None

    def __str__(self) -> str:
        return f"{self.action:6} {self.target}" + (f": {self.detail}" if self.detail else "")


@dataclass
class DatasetPlan:
    dataset: Dataset | None  # None: a parent (the root or an owner folder)
    name: str
    mountpoint: str | None  # set only when creating the root
    properties: dict[str, str]
    exists: bool
    current: dict[str, tuple[str, str]]  # property -> (value, source)


@dataclass
class StoragePlan:
    support: PoolSupport
    steps: list[Step]
    warnings: list[str]

    @property
    def changes(self) -> list[Step]:
        return [s for s in self.steps if s.action in ("create", "set", "chown", "acme")]


def _existing(names: Iterable[str]) -> dict[str, dict[str, tuple[str, str]]]:
    """Current properties of the datasets that exist, fetched in one call."""
    names = list(names)
    if not names:
        return {}
    listed = process.run(["zfs", "list", "-H", "-o", "name", "-t", "filesystem"], check=False, timeout=60)
    present = set(listed.stdout.split()) & set(names)
    if not present:
        return {}
    proc = process.run(
        ["zfs", "get", "-H", "-p", "-o", "name,property,value,source", "all", *sorted(present)], timeout=60
    )
    result: dict[str, dict[str, tuple[str, str]]] = {n: {} for n in present}
    for line in proc.stdout.splitlines():
        parts = line.split("\t")
        if len(parts) == 4 and parts[0] in result:
            result[parts[0]][parts[1]] = (parts[2], parts[3])
    return result


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


def plan_storage(plan: Plan, support: PoolSupport | None = None) -> StoragePlan:
    """What apply would do; no changes made. Reads the pool."""
    storage = plan.config.storage
    support = support or probe(storage.pool)
    steps: list[Step] = []
    warnings: list[str] = []
    parents = _parents(plan)
    current = _existing([*parents, *(d.name for d in plan.datasets)])

    said: set[str] = set()

    def warn(target: str, text: str) -> None:
        warnings.append(f"{target}: {text}")
        if text not in said:  # a pool-wide fallback is said once, at the first dataset it affects
            steps.append(Step("warn", target, text))
        said.add(text)

    # the root and owner folders: pool-wide defaults inherited by every app dataset
    base, base_warnings = fit({"atime": "off", "compression": "lz4", "xattr": "sa", "acltype": "posix"}, support)
    for text in base_warnings:
        warn(storage.root, text)
    for name in parents:
        if name in current:
            steps.append(Step("ok", name, "exists"))
            continue
        props = dict(base) if name == storage.root else {}
        argv = ["zfs", "create"]
        if name == storage.root:
            argv += ["-o", f"mountpoint={storage.mountpoint}"]
        argv += [a for k, v in sorted(props.items()) for a in ("-o", f"{k}={v}")] + [name]
        steps.append(Step("create", name, _describe(props, storage.mountpoint if name == storage.root else None), argv))
    for d in plan.datasets:
        wanted, fit_warnings = fit(d.properties, support)
        for text in fit_warnings:
            warn(d.name, text)
        if d.name not in current:
            argv = ["zfs", "create"] + [a for k, v in sorted(wanted.items()) for a in ("-o", f"{k}={v}")]
            if not d.name.startswith(storage.root + "/"):
                argv += ["-o", f"mountpoint={d.path}"]
            steps.append(Step("create", d.name, _describe(wanted, None), [*argv, d.name]))
        else:
            have = current[d.name]
            mounted_at = have.get("mountpoint", ("", ""))[0]
            if mounted_at and mounted_at != d.path:
                warn(
                    d.name,
                    f"mounted at {mounted_at}, the plan expects {d.path}; not changed (bind mounts use {d.path})",
                )
            changed = False
            for prop, value in sorted(wanted.items()):
                old = have.get(prop, ("-", ""))[0]
                if _same(prop, old, value):
                    continue
                changed = True
                if prop in CREATE_ONLY:
                    warn(d.name, f"{prop} is {old}, wanted {value}: only settable at creation; left as is")
                elif prop in NEVER_SHRINK and old not in ("0", "none", "-") and _smaller(value, old):
                    warn(
                        d.name,
                        f"{prop} would shrink from {format_size(int(old)) if old.isdigit() else old} to "
                        f"{value}; apply never shrinks (run zfs set yourself if you mean it)",
                    )
                else:
                    note = " (applies to files written from now on)" if prop == "recordsize" else ""
                    steps.append(
                        Step(
                            "set",
                            d.name,
                            f"{prop} {_show(prop, old)} -> {value}{note}",
                            ["zfs", "set", f"{prop}={value}", d.name],
                        )
                    )
            if not changed:
                steps.append(Step("ok", d.name, "properties as planned"))
        steps += _ownership_steps(d, exists=d.name in current)
    return StoragePlan(support, steps, warnings)


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
    if d.key == ACME_KEY:
        acme = path / "acme.json"
        if not acme.exists() and not acme.is_symlink():
            steps.append(Step("acme", str(acme), "create empty, mode 0600"))
        elif not acme.is_file() or acme.is_symlink():
            steps.append(
                Step(
                    "warn",
                    str(acme),
                    "is not a regular file (Docker creates a directory for a missing "
                    "bind source); remove it and run apply again",
                )
            )
        elif stat.S_IMODE(acme.stat().st_mode) != 0o600:
            steps.append(Step("acme", str(acme), f"mode {stat.S_IMODE(acme.stat().st_mode):04o} -> 0600"))
    return steps


# --- applying ----------------------------------------------------------------------------------


def apply_storage(
    plan: Plan, storage_plan: StoragePlan | None = None, report: Callable[[Step], None] | None = None
) -> StoragePlan:
    """Carry out the plan step by step, reporting each; stop at the first failure (StorageError)."""
    storage_plan = storage_plan or plan_storage(plan)
    by_path = {d.path: d for d in plan.datasets}
    for step in storage_plan.steps:
        try:
            if step.action in ("create", "set") and step.argv:
                process.run(step.argv, timeout=120)
            elif step.action == "chown":
                d = by_path[step.target]
                os.chown(step.target, d.uid, d.gid)
            elif step.action == "acme":
                _ensure_acme(Path(step.target))
        except CommandFailed as exc:
            raise StorageError(f"{step.action} {step.target} failed: {exc}") from None
        except OSError as exc:
            raise StorageError(f"{step.action} {step.target} failed: {exc.strerror} ({exc.filename})") from None
        if report:
            report(step)
    return storage_plan


def _ensure_acme(path: Path) -> None:
    if path.exists():
        if not path.is_file() or path.is_symlink():
            raise StorageError(f"{path} is not a regular file")
        path.chmod(0o600)
        return
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    os.close(fd)
    path.chmod(0o600)
