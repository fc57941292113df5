"""Preflight checks: can this machine run the plan? Each check says ok, warn or fail, and why."""

from __future__ import annotations

import errno
import shutil
import socket
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from homelab.errors import HomelabError
from homelab.plan import Plan
from homelab.runtime import process
from homelab.runtime.compose import compose_command

Level = Literal["ok", "warn", "fail"]


@dataclass(frozen=True)
class Check:
    level: Level
    name: str
    detail: str


def run_checks(plan: Plan, resolve: Callable[[str], None] | None = None) -> list[Check]:
    return [*_docker(), *_ports(plan), *_hostnames(plan, resolve or _resolve), *_zfs(plan), *_acme(plan), *_disk(plan)]


def _docker() -> Iterator[Check]:
    proc = process.run(["docker", "version", "--format", "{{.Server.Version}}"], check=False, timeout=30)
    if proc.returncode == 0:
        yield Check("ok", "docker", f"engine {proc.stdout.strip()} reachable")
    else:
        reason = (proc.stderr.strip().splitlines() or ["no answer"])[-1]
        yield Check("fail", "docker", f"engine not reachable: {reason}")
    try:
        argv, version = compose_command()
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


def _zfs(plan: Plan) -> Iterator[Check]:
    if not shutil.which("zfs"):
        yield Check("warn", "zfs", "zfs command not found: datasets cannot be checked or created")
        return
    proc = process.run(["zfs", "list", "-H", "-o", "name"], check=False, timeout=30)
    if proc.returncode != 0:
        yield Check("fail", "zfs", f"zfs list failed: {proc.stderr.strip()}")
        return
    present = set(proc.stdout.split())
    pool = plan.config.storage.pool
    yield Check("ok" if pool in present else "fail", f"pool {pool}", "present" if pool in present else "missing")
    missing = [d.name for d in plan.datasets if d.name not in present]
    if missing:
        yield Check("warn", "datasets", f"{len(missing)} missing (created by storage apply): {', '.join(missing)}")
    else:
        yield Check("ok", "datasets", f"all {len(plan.datasets)} present")


def acme_json_path(plan: Plan) -> Path | None:
    acme = next((d for d in plan.datasets if d.key == "edge/acme"), None)
    return Path(acme.path) / "acme.json" if acme else None


def _acme(plan: Plan) -> Iterator[Check]:
    path = acme_json_path(plan)
    if path is None:
        return
    try:
        info = path.lstat()
    except FileNotFoundError:
        yield Check("warn", "acme.json", f"{path} does not exist yet (created 0600 before the edge starts)")
        return
    if not stat.S_ISREG(info.st_mode):
        yield Check("fail", "acme.json", f"{path} is not a regular file (a missing bind source became a folder?)")
    elif stat.S_IMODE(info.st_mode) != 0o600:
        yield Check("fail", "acme.json", f"{path} has mode {stat.S_IMODE(info.st_mode):04o}; Traefik needs 0600")
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
