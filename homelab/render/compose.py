"""Plan stack -> compose.yaml (a dict dumped to YAML; one Compose project per stack)."""

from __future__ import annotations

from typing import Any

from homelab.layout import SECRETS_DIR, project_name
from homelab.plan_model import Plan, Service, Stack
from homelab.render.rendering import GENERATED_MARK
from homelab.render.yamldump import dump, escape_compose


def render_stack(plan: Plan, stack: Stack) -> str:
    services = {name: _service(plan, stack, service) for name, service in stack.services.items()}
    document: dict[str, Any] = {"name": project_name(stack.name), "services": services}
    secret_names = sorted({name for s in stack.services.values() for name, _ in s.secrets})
    if secret_names:
        document["secrets"] = {name: {"file": f"../{SECRETS_DIR}/{name}"} for name in secret_names}
    if any(s.networks for s in stack.services.values()):
        used = {n for s in stack.services.values() for n in s.networks}
        document["networks"] = {name: spec for name, spec in stack.networks.items() if name in used}
    return dump(document, header=GENERATED_MARK)


def _service(plan: Plan, stack: Stack, service: Service) -> dict[str, Any]:
    """Compose's keys in a fixed order; keys without a value are left out (see `_present`)."""
    keys: dict[str, Any] = {
        "image": service.image,
        "build": {"context": f"./{service.build}"} if service.build else None,
        "user": service.user or None,
        "entrypoint": _escaped(service.entrypoint),
        "command": _escaped(service.command),
        "restart": "unless-stopped",
        "security_opt": ["no-new-privileges:true"],
        **_limits(service),
        "environment": {k: escape_compose(v) for k, v in sorted(service.environment.items())},
        "secrets": [{"source": name, "target": target} if target else name for name, target in service.secrets],
        "volumes": [
            {"type": "bind", "source": m.source, "target": m.target, "read_only": m.read_only} for m in service.mounts
        ],
        "ports": list(service.ports),
        "devices": list(service.devices),
        "tmpfs": list(service.tmpfs),
        "cap_add": list(service.cap_add),
        "network_mode": service.network_mode or None,
        "networks": None if service.network_mode else list(service.networks),
        "depends_on": _depends_on(stack, service),
        "healthcheck": _healthcheck(service),
        "labels": _labels(plan, stack, service),
        "logging": {"driver": "json-file", "options": {"max-size": "10m", "max-file": "3"}},
    }
    return {k: v for k, v in keys.items() if _present(k, v)}


def _present(key: str, value: Any) -> bool:
    """None, [] and {} mean "not set", except an empty entrypoint or command: it overrides the image's."""
    return value is not None and (value not in ([], {}) or key in ("entrypoint", "command"))


def _escaped(argv: list[str] | None) -> list[str] | None:
    return None if argv is None else [escape_compose(a) for a in argv]


def _depends_on(stack: Stack, service: Service) -> dict[str, Any]:
    """Wait for a dependency's health check when it has one, else for its start."""
    return {
        dep: {
            "condition": "service_healthy" if stack.services[dep].healthcheck else "service_started",
            "restart": True,
        }
        for dep in service.depends_on
    }


def _healthcheck(service: Service) -> dict[str, Any] | None:
    if not service.healthcheck:
        return None
    return {k: (v if k != "test" else [escape_compose(a) for a in v]) for k, v in service.healthcheck.items()}


def _labels(plan: Plan, stack: Stack, service: Service) -> dict[str, str]:
    """Traefik's routing labels, when Traefik is the edge."""
    labels: dict[str, str] = {}
    if plan.config.edge.kind == "traefik":
        from homelab.render.edge_traefik import route_labels, tcp_route_labels

        route = plan.route_for(stack.name, service.name)
        if route:
            labels.update(route_labels(plan, route))
        for tcp_route in plan.tcp_routes_for(stack.name, service.name):
            labels.update(tcp_route_labels(tcp_route))
    return {k: escape_compose(v) for k, v in labels.items()}


def _limits(service: Service) -> dict[str, Any]:
    """The service's resources, the capabilities it drops, a read-only root (docs/resources.md)."""
    out: dict[str, Any] = {"cap_drop": list(service.cap_drop)} if service.cap_drop else {}
    if service.read_only:
        out["read_only"] = True
    if service.resources:
        r = service.resources
        keys = {"mem_limit": r.memory, "mem_reservation": r.reservation, "pids_limit": r.pids, "cpus": r.cpus}
        out.update({key: value for key, value in keys.items() if value is not None})
        if r.cpu_weight is not None:
            out["cpu_shares"] = r.cpu_weight
    return out
