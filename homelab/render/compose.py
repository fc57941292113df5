"""Plan stack -> compose.yaml (a dict dumped to YAML; one Compose project per stack)."""

from __future__ import annotations

from typing import Any

from homelab.plan import Plan, Service, Stack
from homelab.render import GENERATED_MARK
from homelab.render.yamldump import dump, escape_compose

SECRETS_DIR = "secrets"  # sibling of the stack folders, so compose files reference ../secrets/NAME


def project_name(stack: Stack) -> str:
    return f"homelab-{stack.name}"


def render_stack(plan: Plan, stack: Stack) -> str:
    services = {name: _service(plan, stack, service) for name, service in stack.services.items()}
    document: dict[str, Any] = {"name": project_name(stack), "services": services}
    secret_names = sorted({name for s in stack.services.values() for name, _ in s.secrets})
    if secret_names:
        document["secrets"] = {name: {"file": f"../{SECRETS_DIR}/{name}"} for name in secret_names}
    if any(s.networks for s in stack.services.values()):
        used = {n for s in stack.services.values() for n in s.networks}
        document["networks"] = {name: spec for name, spec in stack.networks.items() if name in used}
    return dump(document, header=GENERATED_MARK)


def _service(plan: Plan, stack: Stack, service: Service) -> dict[str, Any]:
    out: dict[str, Any] = {"image": service.image}
    if service.build:
        out["build"] = {"context": f"./{service.build}"}
    if service.user:
        out["user"] = service.user
    if service.entrypoint is not None:
        out["entrypoint"] = [escape_compose(a) for a in service.entrypoint]
    if service.command is not None:
        out["command"] = [escape_compose(a) for a in service.command]
    out["restart"] = "unless-stopped"
    out["security_opt"] = ["no-new-privileges:true"]
    if service.environment:
        out["environment"] = {k: escape_compose(v) for k, v in sorted(service.environment.items())}
    if service.secrets:
        out["secrets"] = [{"source": name, "target": target} if target else name for name, target in service.secrets]
    if service.mounts:
        out["volumes"] = [
            {"type": "bind", "source": m.source, "target": m.target, "read_only": m.read_only} for m in service.mounts
        ]
    if service.ports:
        out["ports"] = list(service.ports)
    if service.devices:
        out["devices"] = list(service.devices)
    if service.tmpfs:
        out["tmpfs"] = list(service.tmpfs)
    if service.cap_add:
        out["cap_add"] = list(service.cap_add)
    if service.network_mode:
        out["network_mode"] = service.network_mode
    elif service.networks:
        out["networks"] = list(service.networks)
    if service.depends_on:
        out["depends_on"] = {
            dep: {
                "condition": "service_healthy" if stack.services[dep].healthcheck else "service_started",
                "restart": True,
            }
            for dep in service.depends_on
        }
    if service.healthcheck:
        out["healthcheck"] = {
            k: (v if k != "test" else [escape_compose(a) for a in v]) for k, v in service.healthcheck.items()
        }
    labels = dict(service.labels)
    if plan.config.edge.kind == "traefik":
        from homelab.render.edge_traefik import route_labels, tcp_route_labels

        route = plan.route_for(stack.name, service.name)
        if route:
            labels.update(route_labels(plan, route))
        for tcp_route in plan.tcp_routes_for(stack.name, service.name):
            labels.update(tcp_route_labels(tcp_route))
    if labels:
        out["labels"] = {k: escape_compose(v) for k, v in labels.items()}
    out["logging"] = {"driver": "json-file", "options": {"max-size": "10m", "max-file": "3"}}
    return out
