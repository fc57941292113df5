"""An in-memory swarm behind homelab.runtime.swarm.Swarm that records every call.

`deploy` does what `docker stack deploy` does to the fake's services: each service of the given files
(read from disk; `${VAR:?...}` filled from the env) is created, or updated (its version bumped) when its
spec differs, with one task running the new spec's digest label. Steer it with:
`nodes_list` (the nodes), `pending[service]` (its task stays pending with that reason), `rejected[service]`
(its task is rejected with that error and shut down, as the engine does when a bind source is missing),
`fail(service, ...)` (its task ends after the deploy), `node_root` (a folder that stands for the nodes' /:
`run_job` runs its script there with /bin/sh; else it only records the job in `jobs`), `job_error`,
`rollback[service]` (its update fails: the previous spec comes back, update state rollback_completed),
`busy_network[namespace]` (that many `stack rm` fail: a stopping task still uses the stack's network),
`local_state` / `manager` (what `docker info` says), `network_subnets` (`docker network inspect`: the
engine's default docker_gwbridge pool unless set).
"""

from __future__ import annotations

import itertools
import json
import re
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from homelab.errors import CommandFailed
from homelab.runtime.swarm import JOB_ROOT, SPEC_LABEL, JobNotStarted, Node, Service, SwarmState, Task

_ids = itertools.count(1)


def node(hostname: str = "nas", **fields: object) -> Node:
    base = Node(f"n-{hostname}", hostname, "manager", "ready", "active", "10.0.0.1", {})
    return replace(base, **fields)  # type: ignore[arg-type]


class FakeSwarm:
    def __init__(self, *nodes: Node) -> None:
        self.nodes_list = list(nodes) or [node()]
        self.local_state, self.manager = "active", True
        self.calls: list[tuple[object, ...]] = []
        self.specs: dict[str, dict[str, Any]] = {}  # service name -> the spec deployed
        self.svc: dict[str, Service] = {}
        self.task_list: dict[str, Task] = {}  # service name -> its one task
        self.pending: dict[str, str] = {}
        self.rejected: dict[str, str] = {}
        self.jobs: list[tuple[str, str, tuple[str, ...]]] = []  # name, image, constraints
        self.node_root: Path | None = None
        self.job_error: str | None = None
        self.rollback: dict[str, str] = {}
        self.busy_network: dict[str, int] = {}
        self.networks_left: set[str] = set()  # namespaces whose network a failed `stack rm` left
        self.secrets: dict[str, set[str]] = {}  # namespace -> names
        self.configs: dict[str, set[str]] = {}
        self.deployed_files: list[dict[str, Any]] = []
        self.current: dict[str, tuple[str, ...]] = {}  # service -> the secrets its spec names
        self.network_subnets: dict[str, list[str]] = {"docker_gwbridge": ["172.18.0.0/16"]}
        self.service_logs: dict[str, list[str]] = {}  # service name -> the lines its tasks wrote

    def state(self) -> SwarmState:
        return SwarmState(self.local_state, self.manager, self.nodes_list[0].id)

    def nodes(self) -> list[Node]:
        return list(self.nodes_list)

    def label_node(self, node_id: str, labels: Mapping[str, str]) -> None:
        self.calls.append(("label_node", node_id, dict(labels)))
        self.nodes_list = [replace(n, labels={**n.labels, **labels}) if n.id == node_id else n for n in self.nodes_list]

    def services(self, namespaces: Iterable[str] | None = None) -> list[Service]:
        wanted = set(namespaces) if namespaces is not None else None
        return [s for s in self.svc.values() if wanted is None or s.namespace in wanted]

    def tasks(self, service_ids: Sequence[str]) -> list[Task]:
        return [t for t in self.task_list.values() if t.service_id in service_ids]

    def deploy(self, namespace: str, files: Sequence[Path], env: Mapping[str, str]) -> None:
        self.calls.append(("deploy", namespace, [f.name for f in files]))
        document = self._merged(files, env)
        self.deployed_files.append(document)
        for kind, store in (("secrets", self.secrets), ("configs", self.configs)):
            store.setdefault(namespace, set()).update(v["name"] for v in document.get(kind, {}).values())
        for short, spec in document["services"].items():
            self._deploy_service(namespace, short, spec, document)

    def _merged(self, files: Sequence[Path], env: Mapping[str, str]) -> dict[str, Any]:
        merged: dict[str, Any] = {}
        for path in files:
            text = re.sub(r"\$\{([A-Z0-9_]+):\?[^}]*\}", lambda m: env[m.group(1)], path.read_text())
            document = yaml.safe_load(text)
            for key, value in document.items():
                if key == "services":
                    for name, spec in value.items():
                        merged.setdefault("services", {}).setdefault(name, {}).update(spec)
                else:
                    merged.setdefault(key, {}).update(value)
        return merged

    def _deploy_service(self, namespace: str, short: str, spec: dict[str, Any], document: dict[str, Any]) -> None:
        name = f"{namespace}_{short}"
        digest = spec["deploy"]["labels"][SPEC_LABEL]
        old = self.svc.get(name)
        if old is not None and self.specs[name] == spec:
            return
        secret_names = tuple(document["secrets"][ref["source"]]["name"] for ref in spec.get("secrets", []))
        # what the previous spec named is still in use (Swarm rolls back to it), as `service inspect` says
        previous, self.current[name] = self.current.get(name, ()), secret_names
        config_names = tuple(document["configs"][ref["source"]]["name"] for ref in spec.get("configs", []))
        service = Service(
            id=old.id if old else f"s{next(_ids):04d}",
            name=name,
            namespace=namespace,
            version=(old.version + 1) if old else 1,
            spec_digest=digest,
            image=spec["image"],
            replicas=1,
            update_state="completed" if old else "",
            update_message="",
            updated_at="2026-11-27T10:00:00.000000000Z",
            secrets=tuple(dict.fromkeys(secret_names + previous)),
            configs=config_names,
        )
        if short in self.rollback and old is not None:
            service = replace(old, version=service.version + 1, update_state="rollback_completed")
            service = replace(service, update_message=self.rollback[short])
            self.svc[name] = service
            return
        self.specs[name], self.svc[name] = json.loads(json.dumps(spec)), service
        state, reason = ("pending", self.pending[short]) if short in self.pending else ("running", "started")
        self.task_list[name] = Task(f"t{next(_ids):04d}", service.id, "", "running", state, "", reason, "", digest)
        if state == "running":
            self.task_list[name] = replace(self.task_list[name], node_id=self.nodes_list[0].id, error="")
        if short in self.rejected:
            self.fail(short, "rejected", self.rejected[short])

    def fail(self, short: str, state: str, error: str, *, desired: str = "shutdown", node_id: str = "") -> None:
        """The service's task ends in `state` with `error` (its desired state `desired`), and no other starts."""
        name = next(n for n in self.svc if n.endswith(f"_{short}"))
        task = self.task_list[name]
        self.task_list[name] = replace(
            task,
            desired=desired,
            state=state,
            error=error,
            node_id=node_id or task.node_id,
            updated_at="2026-11-27T10:05Z",
        )

    def remove_services(self, names: Sequence[str]) -> None:
        self.calls.append(("remove_services", list(names)))
        for name in names:
            self.svc.pop(name, None)
            self.task_list.pop(name, None)

    def remove_stack(self, namespace: str) -> str:
        self.calls.append(("remove_stack", namespace))
        self.remove_services([n for n, s in self.svc.items() if s.namespace == namespace])
        if self.busy_network.get(namespace, 0) > 0:
            self.busy_network[namespace] -= 1
            self.networks_left.add(namespace)
            return f"Failed to remove network {namespace}_default: network is in use by task t0001"
        self.networks_left.discard(namespace)
        return ""

    def leftovers(self, namespace: str) -> list[str]:
        network = [f"{namespace}_default"] if namespace in self.networks_left else []
        return [n for n, s in self.svc.items() if s.namespace == namespace] + network

    def objects(self, kind: str, namespace: str) -> list[str]:
        return sorted((self.secrets if kind == "secret" else self.configs).get(namespace, set()))

    def remove_objects(self, kind: str, names: Sequence[str]) -> None:
        self.calls.append(("remove_objects", kind, list(names)))
        for store in (self.secrets if kind == "secret" else self.configs).values():
            store.difference_update(names)

    def logs_argv(self, name: str, *, follow: bool, tail: str) -> list[str]:
        return ["docker", "service", "logs", "--tail", tail, *(["-f"] if follow else []), name]

    def logs_tail(self, name: str, count: int) -> str:
        self.calls.append(("logs", name))
        return "".join(self.service_logs.get(name, [])[-count:])

    def subnets(self, network: str) -> list[str]:
        return list(self.network_subnets.get(network, []))

    def run_job(self, name: str, image: str, constraints: Sequence[str], script: str, *, timeout: float) -> str:
        self.jobs.append((name, image, tuple(constraints)))
        if self.job_error is not None:
            failure = JobNotStarted if self.job_error.startswith("pending") else CommandFailed
            raise failure(["docker", "service", "create", name], 1, "", f"job {name} {self.job_error}")
        if self.node_root is None:
            return ""
        proc = subprocess.run(
            ["/bin/sh", "-c", script.replace(JOB_ROOT, str(self.node_root))], capture_output=True, text=True
        )
        if proc.returncode != 0:
            raise CommandFailed(
                ["docker", "service", "create", name], 1, proc.stdout, f"job {name} failed: {proc.stderr}"
            )
        return proc.stdout
