"""A single-node swarm for the swarm tests: `docker swarm init` on loopback under the docker engine lock
(the session's `world` fixture holds it), left with `swarm leave --force` after the last test of this
folder, also on failure, with every stack, secret, config and network it made removed, so the compose
tests that run later in the same session meet the engine as they expect it."""

from __future__ import annotations

import json
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import standins
import yaml
from dockerlab import HEALTH_OVERRIDE, Deployment, https_get, remove_homelab_resources, wait_for

from tests.conftest import find_program, machine_lock, missing
from tests.swarm.threenode import Rig, host_untouched, kill_leftovers


def _names(kind: str) -> set[str]:
    return set(standins.docker(kind, "ls", "--format", "{{.Name}}", check=False).stdout.split())


def _swarm_state() -> str:
    return json.loads(standins.docker("info", "--format", "{{json .Swarm}}").stdout)["LocalNodeState"]


def leave_swarm(networks_before: set[str]) -> None:
    """Every homelab stack removed, the swarm left, and the networks Swarm made (ingress,
    docker_gwbridge) gone."""
    stacks = standins.docker("stack", "ls", "--format", "{{.Name}}", check=False).stdout.split()
    for stack in stacks:
        if stack.startswith("homelab-"):
            standins.docker("stack", "rm", stack, check=False)
    standins.docker("swarm", "leave", "--force", check=False)
    wait_for(lambda: _swarm_state() == "inactive", 60, "the engine to leave the swarm")
    for network in _names("network") - networks_before:
        standins.docker("network", "rm", network, check=False)
    remove_homelab_resources()


# docker_gwbridge (the bridge of swarm tasks to the outside), made before `swarm init` as Docker's docs
# say to choose its subnet: left to `swarm init` it takes the engine's next free default pool, which
# depends on the earlier tests' networks; as 172.30.0.0/16 it overlapped the labs' compose proxy networks
# (172.30.N.0/24: "Pool overlaps", compose created none), as 192.168.x.0/20 it was outside their LAN
GATEWAY_BRIDGE_SUBNET = "172.29.254.0/24"


def _create_gateway_bridge() -> None:
    standins.docker("network", "rm", "docker_gwbridge", check=False)  # a swarm left earlier keeps it
    options = {"name": "docker_gwbridge", "enable_icc": "false", "enable_ip_masquerade": "true"}
    args = [arg for key, value in options.items() for arg in ("--opt", f"com.docker.network.bridge.{key}={value}")]
    standins.docker("network", "create", "--subnet", GATEWAY_BRIDGE_SUBNET, *args, "docker_gwbridge")


@pytest.fixture(scope="package")
def swarm(world) -> Iterator[str]:  # type: ignore[no-untyped-def]
    """The node's ID; the engine is a one-node swarm manager until the last test here is done."""
    assert _swarm_state() == "inactive", "the engine is already in a swarm: not ours to take over"
    remove_homelab_resources()
    networks_before = _names("network") - {"docker_gwbridge"}
    try:
        _create_gateway_bridge()
        standins.docker("swarm", "init", "--advertise-addr", "127.0.0.1")
        yield standins.docker("info", "--format", "{{.Swarm.NodeID}}").stdout.strip()
    finally:
        leave_swarm(networks_before)


class SwarmDeployment(Deployment):
    """A Deployment (tests/docker/dockerlab.py) whose healthcheck overrides are also written for the
    stack files (`stack.override.yaml`, which homelab passes to `stack deploy` after stack.yaml)."""

    def write_overrides(self) -> None:
        super().write_overrides()
        for stack_file in self.stacks_dir.glob("*/stack.yaml"):
            document = yaml.safe_load(stack_file.read_text())
            services = {
                name: {"healthcheck": HEALTH_OVERRIDE}
                for name, spec in document["services"].items()
                if spec.get("healthcheck")
            }
            (stack_file.parent / "stack.override.yaml").write_text(yaml.safe_dump({"services": services}))

    def engine(self, engine: str) -> None:
        self.data["engine"] = engine
        self.write()
        self.homelab("render")  # the other engine's files, so the overrides can be written for them

    def services(self) -> dict[str, dict]:
        """service name (without the stack) -> `docker service inspect` data, for homelab's stacks."""
        ids = standins.docker("service", "ls", "-q").stdout.split()
        if not ids:
            return {}
        data = json.loads(standins.docker("service", "inspect", *ids).stdout)
        return {
            s["Spec"]["Name"].split("_", 1)[1]: s
            for s in data
            if s["Spec"]["Labels"].get("com.docker.stack.namespace", "").startswith("homelab-")
        }

    def swarm_objects(self, kind: str) -> list[str]:
        return standins.docker(kind, "ls", "--format", "{{.Name}}").stdout.split()

    def versions(self) -> dict[str, int]:
        return {name: s["Version"]["Index"] for name, s in self.services().items()}


def make_swarm_deployment(base: Path, world, apps: dict[str, dict]) -> SwarmDeployment:  # type: ignore[no-untyped-def]
    env, pebble, images = world
    base.mkdir(parents=True, exist_ok=True)
    return SwarmDeployment(base, env, pebble, images, apps)


def swarm_diagnostics(lab: Deployment) -> str:
    """What a failing swarm test shows: what the edge answers for every host now, the domains Traefik
    stored certificates for (acme.json), every homelab service's task history (`docker
    service ps --no-trunc`: states, errors, restarts), the health probes of its containers, and Traefik's
    own log ending with its goroutines (SIGQUIT: the Go runtime prints them and exits), which shows
    where a stalled Traefik waits."""
    parts = []
    for host in lab.hosts().values():
        try:
            parts.append(f"--- {host}: HTTP {https_get(lab.https_port, host, root_pem=lab.pebble.root_pem)[0]}")
        except (OSError, ssl.SSLError) as exc:
            parts.append(f"--- {host}: {exc!r}")
    for acme in lab.base.rglob("acme.json"):
        stored = json.loads(acme.read_text() or "{}")
        domains = {
            name: [(c.get("domain") or {}).get("main") for c in r.get("Certificates") or []]
            for name, r in stored.items()
        }
        parts.append(f"--- {acme}: {domains}")
    services = standins.docker("service", "ls", "--format", "{{.Name}}", check=False).stdout.split()
    for service in sorted(s for s in services if s.startswith("homelab-")):
        tasks = standins.docker("service", "ps", "--no-trunc", service, check=False)
        parts.append(f"--- docker service ps {service}\n{tasks.stdout}{tasks.stderr}")
    containers = standins.docker(
        "ps", "-a", "-q", "--filter", "label=com.docker.stack.namespace", check=False
    ).stdout.split()
    for container in containers:
        health = standins.docker(
            "inspect", "--format", "{{.Name}} {{.State.Status}} {{json .State.Health}}", container, check=False
        )
        parts.append(health.stdout.strip()[:300])
    traefik = standins.docker(
        "ps", "-q", "--filter", "label=com.docker.swarm.service.name=homelab-edge_traefik", check=False
    ).stdout.split()
    for container in traefik:
        standins.docker("kill", "--signal", "QUIT", container, check=False)
        time.sleep(2)
        logs = standins.docker("logs", container, check=False)
        parts.append(f"--- Traefik's log ({container})\n{logs.stdout}{logs.stderr}")
    return "\n".join(parts)


@pytest.fixture(scope="package")
def three_nodes(tmp_path_factory) -> Iterator[tuple[Rig, dict[str, str]]]:  # type: ignore[no-untyped-def]
    """A three-node swarm beside the host's engine (tests/swarm/threenode.py): a manager labelled for
    storage, the edge label on a worker, a plain worker; with the images of a lab of the edge and Gitea
    (service -> tag). Built once per run, taken down after the last test of this folder (its engines
    would idle through the rest of the session), also on failure, and the host checked untouched. It uses
    nothing of the host's engine: no engine lock."""
    for program in ("ip", "nsenter", "unshare", "dockerd", "openssl", "pebble", "pebble-challtestsrv", "traefik"):
        if not find_program(program):
            missing(f"program {program!r}")
    with machine_lock("homelab-three-nodes"):
        kill_leftovers()  # a run killed before its teardown
        before = host_untouched()
        base = tmp_path_factory.mktemp("three-nodes")
        rig = Rig(base / "rig")
        try:
            rig.start()
            (base / "images").mkdir()
            yield rig, rig.build_images(base / "images", find_program("traefik"))  # type: ignore[arg-type]
        finally:
            forced = rig.close()
            assert host_untouched() == before, "the three-node rig left something on the host"
            assert not forced, f"the three-node rig's teardown had to kill: {forced}"
