"""Plan stack -> stack.yaml for `docker stack deploy` (engine: swarm), built from the compose service.

The compose renderer's service is the start (one definition of images, environment, mounts, health);
this module turns it into what Swarm runs, because Swarm ignores or refuses part of compose:
- routing labels go under `deploy.labels` (Traefik's swarm provider reads the service's labels) and name
  the network with `traefik.swarm.network`;
- rendered config files become Swarm configs, named `<stack>_<file>-<content hash>`: configs are
  immutable, so a changed file gets a new name and the service using it rolls;
- secrets become Swarm secrets named `<secret>-${HOMELAB_DIGEST_<SECRET>}`: the digest of the secret's
  content is only known where the secrets folder is (`homelab up` passes it in the environment), so the
  stack file holds no secret and stays the same for the same config; a changed secret rolls its services;
- `update_config` rolls back a failing update by itself: start-first for stateless services (no gap),
  stop-first for services with datasets (two writers on one dataset) and for host-published ports;
- placement: services with datasets on `node.labels.homelab.storage == true`, the edge (host-mode 80/443)
  on `node.labels.homelab.edge == true`, the Docker API reader on a manager.
Not carried over, because Swarm services cannot have them (docs/swarm.md): `devices`, `security_opt`,
`cpu_shares`, `build` (the image must exist on the node), and the host address of a published port.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from homelab.layout import EDGE_STACK, STACK_FILE
from homelab.plan_model import Plan, Service, Stack
from homelab.render.compose import _service as compose_service
from homelab.render.edge_traefik import static_config
from homelab.render.rendering import GENERATED_MARK, Rendering
from homelab.render.yamldump import dump

STORAGE_LABEL = "homelab.storage"
EDGE_LABEL = "homelab.edge"
HOST_NETWORK = "hostnet"  # a service of compose's `network_mode: host` joins Swarm's `host` network
DOCKER_SOCKET = "/var/run/docker.sock"
DIGEST_PREFIX = "HOMELAB_DIGEST_"
# what Traefik's swarm provider asks the Docker API (services, their tasks and the nodes that run them,
# overlay networks): seen refused by the socket proxy (403) in tests/swarm/test_swarm_up.py otherwise
SOCKET_PROXY_SWARM = {"SERVICES": "1", "TASKS": "1", "NODES": "1", "NETWORKS": "1"}


def render(plan: Plan, rendering: Rendering) -> None:
    """Every stack's stack.yaml (after the other renderers: configs are named by their content), and
    Traefik told to read Swarm services instead of containers."""
    if plan.config.edge.kind == "traefik":
        rendering.add("edge/traefik/traefik.yml", dump(traefik_static(plan), header=GENERATED_MARK))
    for stack in plan.stacks.values():
        rendering.add(f"{stack.name}/{STACK_FILE}", render_stack(plan, stack, rendering.files))


def traefik_static(plan: Plan) -> dict[str, Any]:
    config = static_config(plan)
    docker = config["providers"].pop("docker")
    config["providers"] = {"swarm": {**docker, "refreshSeconds": "5s"}, **config["providers"]}
    return config


def digest_variable(secret: str) -> str:
    """The environment variable carrying a secret's content digest (`homelab up` sets it)."""
    return DIGEST_PREFIX + re.sub(r"[^A-Z0-9]", "_", secret.upper())


def content_digest(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()[:12]


def render_stack(plan: Plan, stack: Stack, files: dict[str, bytes]) -> str:
    configs: dict[str, dict[str, str]] = {}
    services = {name: _service(plan, stack, s, files, configs) for name, s in stack.services.items()}
    document: dict[str, Any] = {"services": services}
    secret_names = sorted({name for s in stack.services.values() for name, _ in s.secrets})
    if secret_names:
        document["secrets"] = {
            name: {"name": f"{name}-${{{digest_variable(name)}:?set by homelab up}}", "file": f"../secrets/{name}"}
            for name in secret_names
        }
    if configs:
        document["configs"] = dict(sorted(configs.items()))
    document["networks"] = _networks(plan, stack, services)
    return dump(document, header=GENERATED_MARK)


def _service(
    plan: Plan, stack: Stack, service: Service, files: dict[str, bytes], configs: dict[str, dict[str, str]]
) -> dict[str, Any]:
    spec = compose_service(plan, stack, service)
    for key in ("build", "restart", "security_opt", "devices", "depends_on", "network_mode", "cpu_shares"):
        spec.pop(key, None)
    for key in ("mem_limit", "mem_reservation", "pids_limit", "cpus"):
        spec.pop(key, None)  # -> deploy.resources
    labels = spec.pop("labels", {})
    if labels:
        labels = {("traefik.swarm.network" if k == "traefik.docker.network" else k): v for k, v in labels.items()}
    if service.network_mode == "host":
        spec["networks"] = [HOST_NETWORK]
    if stack.name == EDGE_STACK and service.name == "socket-proxy":
        spec["environment"] = {**spec["environment"], **SOCKET_PROXY_SWARM}
    volumes, config_refs = _mounts(stack, spec.pop("volumes", []), files, configs)
    volumes += [{"type": "tmpfs", "target": path} for path in spec.pop("tmpfs", [])]
    if volumes:
        spec["volumes"] = volumes
    if config_refs:
        spec["configs"] = config_refs
    if spec.get("secrets"):
        spec["secrets"] = [_secret_ref(plan, name, target) for name, target in service.secrets]
    if spec.get("ports"):
        spec["ports"] = [_port(p) for p in spec["ports"]]
    spec["deploy"] = _deploy(plan, stack, service, labels)
    return spec


def _mounts(
    stack: Stack, volumes: list[dict[str, Any]], files: dict[str, bytes], configs: dict[str, dict[str, str]]
) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """Bind mounts stay; a rendered file (or folder of them) becomes one Swarm config per file, so no
    node needs the stacks folder."""
    kept, refs = [], []
    for volume in volumes:
        source = volume["source"]
        if not source.startswith("./"):
            kept.append(volume)
            continue
        prefix = f"{stack.name}/{source[2:]}"
        matches = sorted(p for p in files if p == prefix or p.startswith(prefix.rstrip("/") + "/"))
        for path in matches:
            relative = path[len(prefix) :].lstrip("/")
            slug = re.sub(r"[^A-Za-z0-9_.-]", "_", path.rsplit("/", 1)[-1])[:32]
            name = f"{stack.name}_{slug}-{content_digest(files[path])}"
            configs[name] = {"name": name, "file": f"./{path[len(stack.name) + 1 :]}"}
            target = volume["target"] + (f"/{relative}" if relative else "")
            refs.append({"source": name, "target": target, "mode": 0o444})
    return kept, refs


def _secret_ref(plan: Plan, name: str, target: str | None) -> dict[str, Any]:
    """Owned by the uid the service runs as, readable by it only (compose's bind-mounted file, 0600)."""
    secret = plan.secrets[name]
    ref: dict[str, Any] = {"source": name, "target": target or name}
    ref.update({"uid": str(secret.owner_uid), "gid": str(secret.owner_gid), "mode": 0o400})
    return ref


def _port(text: str) -> dict[str, Any]:
    """ "[host_ip:]published:target[/proto]" -> host mode: the port opens on the node that runs the task,
    as with compose (Swarm's ingress mesh would open it on every node). Swarm has no host address."""
    text, _, protocol = text.partition("/")
    parts = text.split(":")
    return {"target": int(parts[-1]), "published": int(parts[-2]), "protocol": protocol or "tcp", "mode": "host"}


def _deploy(plan: Plan, stack: Stack, service: Service, labels: dict[str, str]) -> dict[str, Any]:
    stateful = _has_dataset(plan, service)
    order = "stop-first" if stateful or service.ports else "start-first"
    # dnsrr: a service's name resolves to its tasks' addresses, no IPVS virtual IP in between. Ports are
    # published in host mode (no routing mesh needed), and a kernel without ip_vs (this project's test
    # machine) still connects: with a virtual IP there, every connection fails with "no route to host".
    deploy: dict[str, Any] = {"mode": "replicated", "replicas": 1, "endpoint_mode": "dnsrr"}
    if labels:
        deploy["labels"] = labels
    constraints = _constraints(plan, stack, service, stateful)
    if constraints:
        deploy["placement"] = {"constraints": constraints}
    resources = _resources(service)
    if resources:
        deploy["resources"] = resources
    deploy["restart_policy"] = {"condition": "any", "delay": "5s"}
    deploy["update_config"] = {"parallelism": 1, "order": order, "failure_action": "rollback", "monitor": "10s"}
    deploy["rollback_config"] = {"parallelism": 1, "order": order}
    return deploy


def placement(plan: Plan, stack: Stack, service: Service) -> list[str]:
    """The placement constraints of a service: the node(s) where what it mounts must exist."""
    return _constraints(plan, stack, service, _has_dataset(plan, service))


def _has_dataset(plan: Plan, service: Service) -> bool:
    paths = {d.path for d in plan.datasets}
    return any(m.source in paths or m.source == plan.config.storage.mountpoint for m in service.mounts)


def _constraints(plan: Plan, stack: Stack, service: Service, stateful: bool) -> list[str]:
    constraints = []
    if stack.name == EDGE_STACK and service.ports:
        constraints.append(f"node.labels.{EDGE_LABEL} == true")
    elif stateful:
        constraints.append(f"node.labels.{STORAGE_LABEL} == true")
    if any(m.source == DOCKER_SOCKET for m in service.mounts):
        constraints.append("node.role == manager")  # only managers answer the Swarm API
    return constraints


def _resources(service: Service) -> dict[str, Any]:
    r = service.resources
    if r is None:
        return {}
    limits = {k: v for k, v in (("cpus", r.cpus), ("memory", r.memory), ("pids", r.pids)) if v is not None}
    out: dict[str, Any] = {"limits": {k: str(v) if k == "cpus" else v for k, v in limits.items()}} if limits else {}
    if r.reservation is not None:
        out["reservations"] = {"memory": r.reservation}
    return out


def _networks(plan: Plan, stack: Stack, services: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Overlay networks; the edge's proxy network is attachable (so a one-off container can join it) and
    encrypted when asked."""
    used = {n for s in services.values() for n in s.get("networks", [])}
    networks: dict[str, Any] = {}
    for name, spec in stack.networks.items():
        if name not in used:
            continue
        spec = {**spec}
        if not spec.get("external"):
            spec = {"driver": "overlay", **spec}
        if name == "proxy" and not spec.get("external"):
            spec["attachable"] = True
            if plan.config.edge.encrypt_overlay:
                spec["driver_opts"] = {"encrypted": "true"}
        networks[name] = spec
    if HOST_NETWORK in used:
        networks[HOST_NETWORK] = {"name": "host", "external": True}
    return networks
