"""`homelab status`: per service, what runs, how healthy, where it is served, when its certificate ends
(read through homelab.certs.store, which owns the reading of acme.json), and how it fares against its
memory limit: in use, OOM-killed, restarts (docs/resources.md)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from homelab.certs.store import Issued, Reader, UnreadableStore, read_here, read_holdings
from homelab.engine.health import container_reason
from homelab.layout import project_name
from homelab.plan_model import Plan
from homelab.runtime.docker import Engine


@dataclass(frozen=True)
class ServiceStatus:
    stack: str
    service: str
    state: str
    health: str
    image: str
    url: str
    cert_expiry: str
    last_change: str
    memory: str = "-"  # in use / limit, e.g. "212 MiB / 1024 MiB" (docker stats, the container's limit)
    oom_killed: bool = False  # its last exit was the kernel's OOM killer at its limit (State.OOMKilled)
    restarts: int = 0  # restarts by its restart policy (RestartCount)
    reason: str = ""  # why it is not running and healthy, in the engine's words ("" when it is)


def status_rows(plan: Plan, docker: Engine) -> list[ServiceStatus]:
    containers = {(c.project, c.service): c for c in docker.containers()}
    in_use = docker.memory_usage([c.id for c in containers.values() if c.running])
    served = served_certificates(plan)
    port = plan.config.edge.https_port
    rows = []
    for stack in plan.stacks.values():
        for name, service in stack.services.items():
            c = containers.get((project_name(stack.name), name))
            route = plan.route_for(stack.name, name)
            rows.append(
                ServiceStatus(
                    stack=stack.name,
                    service=name,
                    state=c.state if c else "absent",
                    health=(c.health or "-") if c else "-",
                    image=service.image,
                    url=f"https://{route.host}" + ("" if port == 443 else f":{port}") if route else "-",
                    cert_expiry=_expiry(served, route.host) if route else "-",
                    last_change=_when(c.created) if c else "-",
                    memory=_memory(in_use.get(c.id), c.memory_limit) if c else "-",
                    oom_killed=c.oom_killed if c else False,
                    restarts=c.restart_count if c else 0,
                    reason=container_reason(docker, c),
                )
            )
    return rows


def _memory(used: int | None, limit: int) -> str:
    mib = 1 << 20
    shown = "-" if used is None else f"{used // mib} MiB"
    return f"{shown} / {limit // mib} MiB" if limit else shown


def _when(stamp: str) -> str:
    try:
        moment = datetime.fromisoformat(stamp[:26].rstrip("Z") + "+00:00" if "." in stamp else stamp)
    except ValueError:
        return stamp
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def served_certificates(plan: Plan, read: Reader = read_here) -> list[Issued]:
    """The certificates Traefik serves now, from acme.json where the edge runs (`read`); none while it
    cannot be read (`homelab certs` and `doctor` say why)."""
    if plan.config.edge.kind != "traefik":
        return []
    try:
        return read_holdings(plan, read).served
    except UnreadableStore:
        return []


def _expiry(served: list[Issued], host: str) -> str:
    dates = [c.not_after for c in served if c.covers(host)]
    return max(dates).strftime("%Y-%m-%d") if dates else "none yet"
