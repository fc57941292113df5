"""Preflight checks: can this machine run the plan? Each check says ok, warn or fail, and why."""

from __future__ import annotations

import errno
import shutil
import socket
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from homelab.checks import Check, Level
from homelab.engine.host import ACME_MODE, AcmeState, acme_json_path, acme_state, wrong_owners
from homelab.errors import CommandFailed, HomelabError
from homelab.images.budget import Budget
from homelab.memory import ArcPlan, host_budget, plan_arc
from homelab.monitoring.discover import drift_report
from homelab.plan_model import Plan
from homelab.runtime.docker import Docker, Engine
from homelab.runtime.ipmi import BmcReader
from homelab.runtime.zfs import ZFS, Zfs, ZfsCli

if TYPE_CHECKING:
    from homelab.engine.interface import Engine as StackEngine


def run_checks(
    plan: Plan,
    resolve: Callable[[str], None] | None = None,
    bmc: BmcReader | None = None,
    *,
    docker: Engine | None = None,
    zfs: Zfs | None = None,
    engine: StackEngine | None = None,
) -> list[Check]:
    from homelab.certs import name_status as status
    from homelab.certs import preflight

    checks = [*_docker(docker or Docker()), *_ports(plan), *_hostnames(plan, resolve or _resolve)]
    from homelab.engine.interface import engine_for

    engine = engine or engine_for(plan.config)
    checks += [*_zfs(plan, zfs or ZfsCli()), *_owners(plan), *_acme(plan, partial(engine.file_state, plan))]
    checks += [*_disk(plan), *_sensors(plan, bmc), *preflight.run(plan, preflight.Probe())]
    checks += engine.checks(plan)
    held = status.held_checks(plan, read=partial(engine.read_file, plan))  # where the edge runs
    return [*checks, *held, *memory_checks(host_budget(plan), plan_arc)]


def memory_checks(box: Budget, arc_of: Callable[[int], ArcPlan]) -> Iterator[Check]:
    """The memory budget against this machine's RAM, and whether the ZFS ARC is capped to fit it."""
    yield Check("fail" if box.problems() else "ok", "memory", " ".join([*box.problems(), box.summary()[0]]))
    for warning in box.warnings():
        yield Check("warn", "memory", warning)
    arc = arc_of(box.arc_max)
    if arc.changes:
        yield Check("warn", "zfs arc", f"{arc.describe()}: run `homelab storage apply`")
    else:
        yield Check("ok", "zfs arc", arc.describe())


def _sensors(plan: Plan, bmc: BmcReader | None) -> Iterator[Check]:
    """The BMC now against the sensor inventory (homelab/monitoring/discover.py), when both exist."""
    if bmc is not None and plan.inventory is not None:
        for level, detail in drift_report(bmc, plan.inventory):
            yield Check(level, "sensors", detail)


def _docker(docker: Engine) -> Iterator[Check]:
    try:
        yield Check("ok", "docker", f"engine {docker.server_version()} reachable")
    except CommandFailed as exc:
        reason = (exc.stderr.strip().splitlines() or ["no answer"])[-1]
        yield Check("fail", "docker", f"engine not reachable: {reason}")
    try:
        argv, version = docker.compose_program()
        yield Check("ok", "compose", f"{' '.join(argv)} {'.'.join(map(str, version))}")
    except HomelabError as exc:
        yield Check("fail", "compose", str(exc))


def _ports(plan: Plan) -> Iterator[Check]:
    for key, port in plan.config.published_ports():
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("0.0.0.0", port))  # noqa: S104 - probing whether the edge could bind
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    yield Check("fail", f"port {port}", f"{key}: already in use by another program")
                else:
                    yield Check("warn", f"port {port}", f"{key}: cannot test ({exc.strerror})")
                continue
        yield Check("ok", f"port {port}", f"{key}: free")


def _resolve(host: str) -> None:
    socket.getaddrinfo(host, 443, proto=socket.IPPROTO_TCP)


def _hostnames(plan: Plan, resolve: Callable[[str], None]) -> Iterator[Check]:
    for route in plan.routes:
        try:
            resolve(route.host)
            yield Check("ok", route.host, "resolves")
        except OSError as exc:
            yield Check("fail", route.host, f"does not resolve ({exc}); check DNS / ddns settings")


def _zfs(plan: Plan, zfs: Zfs) -> Iterator[Check]:
    if not zfs.available():
        yield Check("warn", ZFS, "zfs command not found: datasets cannot be checked or created")
        return
    try:
        present = set(zfs.names())
    except CommandFailed as exc:
        yield Check("fail", ZFS, f"zfs list failed: {exc.stderr.strip()}")
        return
    pool = plan.config.storage.pool
    yield Check("ok" if pool in present else "fail", f"pool {pool}", "present" if pool in present else "missing")
    missing = [d.name for d in plan.datasets if d.name not in present]
    if missing:
        yield Check("warn", "datasets", f"{len(missing)} missing (created by storage apply): {', '.join(missing)}")
    else:
        yield Check("ok", "datasets", f"all {len(plan.datasets)} present")


def _owners(plan: Plan) -> Iterator[Check]:
    """The dataset folders that exist, owned as their apps need (`up` refuses to start otherwise)."""
    wrong = wrong_owners(plan.datasets)
    for problem in wrong:
        yield Check("fail", f"owner {problem.dataset.key}", str(problem))
    if not wrong:
        yield Check("ok", "dataset owners", "every existing dataset folder has its dataset's uid:gid")


def _acme(plan: Plan, state_of: Callable[[Path], AcmeState] = acme_state) -> Iterator[Check]:
    """acme.json as `state_of` finds it: on the node where the edge runs (Engine.file_state)."""
    path = acme_json_path(plan)
    if path is None:
        return
    try:
        state = state_of(path)
    except OSError as exc:
        yield Check("fail", "acme.json", f"{path}: {exc}")
        return
    if state.kind == "missing":
        yield Check("warn", "acme.json", f"{path} does not exist yet (created 0600 before the edge starts)")
    elif state.kind == "not-a-file":
        yield Check("fail", "acme.json", f"{path} is not a regular file (a missing bind source became a folder?)")
    elif state.mode != ACME_MODE:
        yield Check("fail", "acme.json", f"{path} has mode {state.mode:04o}; Traefik needs 0600")
    else:
        yield Check("ok", "acme.json", f"{path}: regular file, 0600")


def _disk(plan: Plan) -> Iterator[Check]:
    path = Path(plan.config.storage.mountpoint)
    while not path.exists():
        path = path.parent
    usage = shutil.disk_usage(path)
    free = usage.free / usage.total * 100 if usage.total else 0
    level: Level = "ok" if free >= 10 else "warn"
    yield Check(level, "disk", f"{path}: {usage.free / 2**30:.1f} GiB free ({free:.0f}%)")
