"""`homelab status`: per service, what runs, how healthy, where it is served, when its certificate ends
(read through homelab.certs.store, which owns the reading of acme.json)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from homelab.certs.store import Issued, UnreadableStore, read_holdings
from homelab.layout import project_name
from homelab.plan import Plan
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


def status(plan: Plan, docker: Engine) -> list[ServiceStatus]:
    containers = {(c.project, c.service): c for c in docker.containers()}
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
                )
            )
    return rows


def _when(stamp: str) -> str:
    try:
        moment = datetime.fromisoformat(stamp[:26].rstrip("Z") + "+00:00" if "." in stamp else stamp)
    except ValueError:
        return stamp
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def served_certificates(plan: Plan) -> list[Issued]:
    """The certificates Traefik serves now, from acme.json; none while it cannot be read (`homelab certs`
    and `doctor` say why)."""
    if plan.config.edge.kind != "traefik":
        return []
    try:
        return read_holdings(plan).served
    except UnreadableStore:
        return []


def _expiry(served: list[Issued], host: str) -> str:
    dates = [c.not_after for c in served if c.covers(host)]
    return max(dates).strftime("%Y-%m-%d") if dates else "none yet"
