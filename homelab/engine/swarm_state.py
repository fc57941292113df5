"""What runs where on the swarm: `status` rows, `homelab nodes`, the node labels placement needs, and
the `doctor` checks of engine: swarm (swarm state, node labels, the ports nodes talk over)."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from ipaddress import ip_network

from homelab.certs.store import Reader, read_here
from homelab.checks import Check
from homelab.engine.model import Down
from homelab.engine.service_status import ServiceStatus, _expiry, _when, served_certificates
from homelab.engine.swarm import task_reason
from homelab.errors import CommandFailed
from homelab.layout import PROJECT_PREFIX, project_name
from homelab.plan_model import Plan
from homelab.render.swarm_stack import EDGE_LABEL, STORAGE_LABEL
from homelab.runtime.docker import describe_failure
from homelab.runtime.swarm import Node, Service, Swarm, Task

# Between nodes (Docker's overlay network docs): 2377/tcp to managers (cluster management), 7946/tcp+udp
# (node discovery), 4789/udp (VXLAN data); ESP (IP protocol 50) too when the overlay is encrypted.
MANAGER_PORT, GOSSIP_PORT = 2377, 7946
# the bridge `swarm init` makes between a node's tasks and the outside, from the engine's next free pool
GATEWAY_BRIDGE = "docker_gwbridge"


@dataclass(frozen=True)
class NodeRow:
    hostname: str
    id: str
    role: str
    state: str
    availability: str
    address: str
    labels: dict[str, str]
    services: list[str] = field(default_factory=list)  # stack/service with a running task there


def running_on(swarm: Swarm, services: list[Service]) -> tuple[dict[str, list[Task]], list[Task]]:
    tasks = [t for t in swarm.tasks([s.id for s in services]) if t.desired == "running"]
    by_service: dict[str, list[Task]] = {}
    for task in tasks:
        by_service.setdefault(task.service_id, []).append(task)
    return by_service, tasks


@dataclass(frozen=True)
class Observed:
    """The swarm's services, all their tasks (of any desired state) and its nodes, read once."""

    services: dict[tuple[str, str], Service]  # (namespace, service) -> the service
    tasks: dict[str, list[Task]]  # service id -> its tasks
    nodes: dict[str, Node]

    @classmethod
    def read(cls, swarm: Swarm) -> Observed:
        services = {(s.namespace, s.service): s for s in swarm.services() if s.namespace.startswith(PROJECT_PREFIX)}
        tasks: dict[str, list[Task]] = {}
        for task in swarm.tasks([s.id for s in services.values()]):
            tasks.setdefault(task.service_id, []).append(task)
        return cls(services, tasks, {n.id: n for n in swarm.nodes()})

    def reason(self, stack: str, service: str) -> tuple[str, bool]:
        """Why the service does not run on all its replicas ("" when it does), and whether it may still."""
        found = self.services.get((project_name(stack), service))
        if found is None:
            return "not deployed (no such service on the swarm)", False
        tasks = self.tasks.get(found.id, [])
        ready = [
            t
            for t in tasks
            if t.desired == "running" and t.state == "running" and self.nodes.get(t.node_id, _UNKNOWN).state == "ready"
        ]
        if len(ready) >= found.replicas:
            return "", False
        return task_reason(tasks, self.nodes)


_UNKNOWN = Node("", "", "", "unknown", "", "")


def swarm_down(plan: Plan, swarm: Swarm, stacks: list[str]) -> list[Down]:
    """Every declared service of `stacks` that does not run on the swarm, with Swarm's reason."""
    seen = Observed.read(swarm)
    result = []
    for name in stacks:
        for service in plan.stacks[name].services:
            reason, starting = seen.reason(name, service)
            if reason:
                result.append(Down(name, service, reason, starting))
    return result


def status(plan: Plan, swarm: Swarm, read: Reader = read_here) -> list[ServiceStatus]:
    """One row per planned service: running, or why it does not (Swarm's reason from its latest task);
    certificates from acme.json as `read` finds it (on the edge node)."""
    seen = Observed.read(swarm)
    served = served_certificates(plan, read)
    port = plan.config.edge.https_port
    rows = []
    for stack in plan.stacks.values():
        for name, planned in stack.services.items():
            found = seen.services.get((project_name(stack.name), name))
            reason = seen.reason(stack.name, name)[0]
            state = "absent" if found is None else ("running" if not reason else reason.partition(":")[0])
            route = plan.route_for(stack.name, name)
            rows.append(
                ServiceStatus(
                    stack=stack.name,
                    service=name,
                    state=state,
                    # Swarm reports a task with a health check as running only once it is healthy
                    health=("healthy" if planned.healthcheck else "-") if state == "running" else "-",
                    image=planned.image,
                    url=f"https://{route.host}" + ("" if port == 443 else f":{port}") if route else "-",
                    cert_expiry=_expiry(served, route.host) if route else "-",
                    last_change=_when(found.updated_at) if found else "-",
                    reason=reason,
                )
            )
    return rows


def nodes(swarm: Swarm) -> list[NodeRow]:
    """Every node, its labels, and the homelab services with a task running on it."""
    services = [s for s in swarm.services() if s.namespace.startswith(PROJECT_PREFIX)]
    names = {s.id: f"{s.namespace.removeprefix(PROJECT_PREFIX)}/{s.service}" for s in services}
    _, tasks = running_on(swarm, services)
    where: dict[str, list[str]] = {}
    for task in tasks:
        if task.state == "running":
            where.setdefault(task.node_id, []).append(names[task.service_id])
    return [
        NodeRow(n.hostname, n.id, n.role, n.state, n.availability, n.address, n.labels, sorted(where.get(n.id, [])))
        for n in swarm.nodes()
    ]


def label_single_node(swarm: Swarm, progress: Callable[[str], None]) -> None:
    """A swarm of one node without homelab's labels (a fresh `docker swarm init`): that node holds the
    storage and is the edge, so label it. With more nodes the owner chooses (docs/swarm.md)."""
    found = swarm.nodes()
    if len(found) == 1 and not any(_labelled(n, STORAGE_LABEL) or _labelled(n, EDGE_LABEL) for n in found):
        progress(f"node {found[0].hostname}: labelled {STORAGE_LABEL}=true and {EDGE_LABEL}=true (the only node)")
        swarm.label_node(found[0].id, {STORAGE_LABEL: "true", EDGE_LABEL: "true"})


def _labelled(node: Node, label: str) -> bool:
    return node.labels.get(label) == "true"


def checks(plan: Plan, swarm: Swarm, connect: Callable[[str, int], None] | None = None) -> Iterator[Check]:
    """Swarm state, the node labels placement needs, and the ports nodes talk over."""
    try:
        state = swarm.state()
    except CommandFailed as exc:
        yield Check("fail", "swarm", f"cannot ask the engine: {describe_failure(exc)}")
        return
    if state.local != "active":
        yield Check("fail", "swarm", f"engine is not in a swarm ({state.local or 'unknown'}): run docker swarm init")
        return
    if not state.manager:
        yield Check("fail", "swarm", "this node is a worker: run homelab on a manager node")
        return
    found = swarm.nodes()
    yield Check("ok", "swarm", f"manager of a swarm of {len(found)} node(s)")
    for node in found:
        if node.state != "ready" or node.availability != "active":
            yield Check("warn", f"node {node.hostname}", f"{node.state}, {node.availability}: nothing is placed there")
    yield from _label_checks(found)
    yield from _gateway_bridge_checks(plan, swarm.subnets(GATEWAY_BRIDGE))
    yield from _edge_port_checks(plan, state.node_id, found, connect or _connect)
    if len(found) == 1:
        yield Check("ok", "overlay ports", "one node: 2377/7946/4789 are not used between nodes")
        return
    yield from _port_checks(state.node_id, found, connect or _connect, plan.config.edge.encrypt_overlay)


def _edge_port_checks(plan: Plan, me: str, found: list[Node], connect: Callable[[str, int], None]) -> Iterator[Check]:
    """The ports the edge publishes (host mode) on the edge node(s), from here: on this node doctor's own
    port checks see them; on another one, a port that answers is the edge (or something in its way), one
    that refuses is free (the edge not there yet), one that cannot be reached is behind a firewall."""
    ports = [port for _, port in plan.config.published_ports()]
    for node in found:
        if node.id == me or not _labelled(node, EDGE_LABEL):
            continue
        for port in ports:
            try:
                connect(node.address, port)
                yield Check("ok", f"edge node {node.hostname}", f"{node.address}:{port}/tcp answers")
            except ConnectionRefusedError:
                yield Check("ok", f"edge node {node.hostname}", f"{node.address}:{port}/tcp free (nothing answers)")
            except OSError as exc:
                yield Check("fail", f"edge node {node.hostname}", f"{node.address}:{port}/tcp not reachable ({exc})")


def _label_checks(found: list[Node]) -> Iterator[Check]:
    for label, what in ((STORAGE_LABEL, "services with datasets"), (EDGE_LABEL, "the edge (80/443)")):
        holders = [n.hostname for n in found if _labelled(n, label)]
        if holders:
            yield Check("ok", f"label {label}", f"{', '.join(holders)}: runs {what}")
        elif len(found) == 1:
            yield Check("warn", f"label {label}", "no node has it: `homelab up` labels the only node")
        else:
            yield Check("fail", f"label {label}", f"no node has it: {what} stay pending (docs/swarm.md)")
    if len([n for n in found if _labelled(n, STORAGE_LABEL)]) > 1:
        yield Check("fail", f"label {STORAGE_LABEL}", "on more than one node: a dataset exists on one node only")


def _gateway_bridge_checks(plan: Plan, subnets: list[str]) -> Iterator[Check]:
    """docker_gwbridge must stay clear of the proxy network (the deploy fails with "Pool overlaps"), and
    requests from this node itself to the edge arrive from it (Docker's userland proxy): outside
    edge.lan_cidrs, LAN-only routes refuse them (docs/swarm.md)."""
    edge = plan.config.edge
    proxy, lan = ip_network(edge.proxy_subnet), [ip_network(c) for c in edge.lan_cidrs]
    name = GATEWAY_BRIDGE
    for subnet in map(ip_network, subnets):
        if subnet.overlaps(proxy):
            yield Check("fail", name, f"{subnet} overlaps edge.proxy_subnet {proxy}: the proxy network cannot be made")
        elif any(subnet.version == cidr.version and subnet.subnet_of(cidr) for cidr in lan):  # type: ignore[arg-type]
            yield Check("ok", name, f"{subnet}: inside edge.lan_cidrs")
        else:
            why = (
                "LAN-only routes refuse requests from this node itself (they arrive from it): add it to edge.lan_cidrs"
            )
            yield Check("warn", name, f"{subnet} is outside edge.lan_cidrs: {why}")


def _port_checks(me: str, found: list[Node], connect: Callable[[str, int], None], encrypted: bool) -> Iterator[Check]:
    for node in found:
        if node.id == me:
            continue
        ports = [GOSSIP_PORT] + ([MANAGER_PORT] if node.role == "manager" else [])
        for port in ports:
            try:
                connect(node.address, port)
                yield Check("ok", f"node {node.hostname}", f"{node.address}:{port}/tcp reachable")
            except OSError as exc:
                yield Check("fail", f"node {node.hostname}", f"{node.address}:{port}/tcp not reachable ({exc})")
    extra = " and ESP (IP protocol 50, encrypted overlay)" if encrypted else ""
    yield Check("warn", "overlay ports", f"7946/udp and 4789/udp{extra} cannot be probed from here: open them")


def _connect(address: str, port: int) -> None:
    with socket.create_connection((address, port), timeout=3):
        pass
