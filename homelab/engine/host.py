"""Preparing the host for the stacks: the bind-mount folders of the datasets, and Traefik's acme.json.

acme.json lives in the `edge/acme` dataset and must exist as a 0600 regular file before the edge
starts: Docker turns a missing bind source into a folder, and Traefik refuses a file others can read.
`homelab storage apply` and `homelab up` both create it here; `homelab doctor` reads its state here.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from homelab.errors import HomelabError
from homelab.layout import EDGE_STACK
from homelab.plan_model import Dataset, Plan

ACME_KEY = "edge/acme"  # the dataset that holds acme.json
ACME_MODE = 0o600


class HostError(HomelabError):
    """Something on the host stands where homelab must put a file or folder."""


@dataclass(frozen=True)
class AcmeState:
    path: Path
    kind: Literal["missing", "not-a-file", "file"]  # not-a-file: a folder, a symlink, a device...
    mode: int = 0  # permission bits, for a file

    @property
    def ready(self) -> bool:
        return self.kind == "file" and self.mode == ACME_MODE


def acme_json_of(dataset: Dataset) -> Path | None:
    """acme.json's place on the host when this dataset is the one that holds it."""
    return Path(dataset.path) / "acme.json" if dataset.key == ACME_KEY else None


def acme_json_path(plan: Plan) -> Path | None:
    """Where Traefik keeps its certificates; None when the plan has no edge/acme dataset."""
    return next((path for d in plan.datasets if (path := acme_json_of(d)) is not None), None)


def acme_state(path: Path) -> AcmeState:
    try:
        info = path.lstat()
    except FileNotFoundError:
        return AcmeState(path, "missing")
    if not stat.S_ISREG(info.st_mode):
        return AcmeState(path, "not-a-file")
    return AcmeState(path, "file", stat.S_IMODE(info.st_mode))


def ensure_acme_json(path: Path) -> bool:
    """Make acme.json an empty 0600 file if missing, or fix its mode; True when it was created.
    Raises HostError, changing nothing, when something else stands there."""
    state = acme_state(path)
    if state.kind == "not-a-file":
        raise HostError(
            f"{path} is not a regular file (a missing bind source became a folder?): remove it and run again"
        )
    if state.kind == "missing":
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, ACME_MODE)
        os.close(fd)
    if state.mode != ACME_MODE:
        path.chmod(ACME_MODE)  # also after creating: the umask may have taken bits away
    return state.kind == "missing"


@dataclass(frozen=True)
class WrongOwner:
    """A dataset's folder owned by someone other than the uid:gid its apps run as (or the image expects)."""

    path: str
    found: tuple[int, int]
    dataset: Dataset

    def __str__(self) -> str:
        d = self.dataset
        return (
            f"{self.path} is owned by {self.found[0]}:{self.found[1]}, but {d.key} needs {d.uid}:{d.gid} "
            f"(data restored or moved from another tool?): chown -R {d.uid}:{d.gid} {self.path}"
        )


def wrong_owners(datasets: Iterable[Dataset]) -> list[WrongOwner]:
    """The datasets' existing folders whose owner is not the dataset's uid:gid. Only the folder itself is
    read (a whole tree would take minutes on a big pool): homelab sets it (here, or `storage apply` on a ZFS
    mountpoint) and no image's start-up changes it, so another owner means the data came from elsewhere,
    which the images' start-ups do not all repair (Nextcloud's Apache, as www-data, reads its files as they
    are; Redis, started as 999:1000, must enter /data)."""
    out = []
    for dataset in datasets:
        try:
            info = Path(dataset.path).stat()
        except FileNotFoundError:
            continue
        if (info.st_uid, info.st_gid) != (dataset.uid, dataset.gid):
            out.append(WrongOwner(dataset.path, (info.st_uid, info.st_gid), dataset))
    return out


def stack_datasets(plan: Plan, stacks: Iterable[str]) -> list[Dataset]:
    """The datasets the stacks' services mount (or own)."""
    owners = {e for s in set(stacks) for e in _owners(plan, s)}
    return [d for d in plan.datasets if d.owner in owners]


@dataclass(frozen=True)
class Needed:
    """A bind source the stacks need before they start: a dataset folder (owned by uid:gid), or acme.json
    (an empty 0600 file)."""

    path: Path
    kind: Literal["folder", "acme"]
    uid: int = 0
    gid: int = 0
    service: tuple[str, str] = ("", "")  # (stack, service) that mounts it: where it must exist


def needed(plan: Plan, stacks: Iterable[str], *, zfs_datasets: set[str] | None = None) -> list[Needed]:
    """The bind-mount sources of the stacks' datasets when they are plain folders (ZFS datasets are
    created and mounted by `homelab storage`), and acme.json before the edge starts."""
    wanted = set(stacks)
    owners = {e for s in wanted for e in _owners(plan, s)}
    result = []
    for dataset in plan.datasets:
        if dataset.owner not in owners or (zfs_datasets and dataset.name in zfs_datasets):
            continue
        result.append(Needed(Path(dataset.path), "folder", dataset.uid, dataset.gid, mounted_by(plan, dataset.path)))
    if EDGE_STACK in wanted and plan.config.edge.kind == "traefik":
        acme = acme_json_path(plan)
        if acme is not None:
            result.append(Needed(acme, "acme", service=mounted_by(plan, str(acme.parent))))
    return result


def prepare_host(plan: Plan, stacks: Iterable[str], *, zfs_datasets: set[str] | None = None) -> list[str]:
    """Create on this host what `needed` lists and is missing: dataset folders owned by the dataset's uid/gid
    (mode 0750: its apps run as that uid, or as root with DAC_OVERRIDE, or skip their root-only walks: facts
    `startup`), acme.json as an empty 0600 file. Returns what it created. Raises HostError, before creating
    anything, when a dataset's folder belongs to another uid:gid (wrong_owners), or when homelab, not root,
    cannot give a new folder its owner."""
    wanted = set(stacks)
    items = needed(plan, wanted, zfs_datasets=zfs_datasets)
    root = os.geteuid() == 0
    missing = {i.path for i in items if i.kind == "folder" and not i.path.exists()}
    problems = [str(w) for w in wrong_owners(stack_datasets(plan, wanted))]
    if not root:
        uid, gid = os.geteuid(), os.getegid()
        problems += [
            f"{d.path} would be owned by {uid}:{gid}, not {d.uid}:{d.gid} ({d.key}): run as root, or "
            f"mkdir -p {d.path} && chown {d.uid}:{d.gid} {d.path}"
            for d in stack_datasets(plan, wanted)
            if Path(d.path) in missing and (d.uid, d.gid) != (uid, gid)
        ]
    if problems:
        raise HostError("not starting: dataset folders with the wrong owner\n  " + "\n  ".join(problems))
    created = []
    for item in items:
        if item.kind == "acme":
            if ensure_acme_json(item.path):
                created.append(str(item.path))
        elif item.path in missing:
            item.path.mkdir(parents=True, mode=0o750)
            if root:
                os.chown(item.path, item.uid, item.gid)
            created.append(str(item.path))
    return created


def mounted_by(plan: Plan, path: str) -> tuple[str, str]:
    """The first service that mounts `path` (the node it runs on must have it)."""
    for stack in plan.stacks.values():
        for name, service in stack.services.items():
            if any(m.source == path for m in service.mounts):
                return stack.name, name
    return "", ""


def _owners(plan: Plan, stack_name: str) -> set[str]:
    """Dataset owners (apps, or the stack itself) whose services live in this stack."""
    stack = plan.stacks.get(stack_name)
    if stack is None:
        return set()
    owners = {stack_name}
    owners |= {r.app for r in plan.routes if r.stack == stack_name}
    owners |= {
        d.owner for d in plan.datasets if any(m.source == d.path for s in stack.services.values() for m in s.mounts)
    }
    return owners
