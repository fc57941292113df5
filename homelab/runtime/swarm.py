"""The Docker Swarm driver: every `docker stack|service|node|secret|config` call homelab makes (engine: swarm).

Each homelab stack is one Swarm stack (namespace `homelab-<stack>`), deployed from files in its stack
folder. What runs is read from the manager (`service inspect`, `inspect --type task`, `node inspect`),
never remembered.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from homelab.errors import CommandFailed
from homelab.runtime import process

NAMESPACE_LABEL = "com.docker.stack.namespace"
JOB_LABEL = "homelab.job"  # on the one-shot services `run_job` makes (and removes)
ENDED = ("complete", "failed", "rejected", "shutdown", "orphaned")  # a job's task that will not run (again)
JOB_ROOT = "/host"  # where a job sees its node's / (its files are the node's, not the manager's)
SPEC_LABEL = "homelab.spec"  # digest of what homelab deployed, on the service and its tasks (homelab/engine/swarm.py)


@dataclass(frozen=True)
class SwarmState:
    local: str  # inactive | pending | active | error | locked
    manager: bool  # this engine can answer the Swarm API
    node_id: str


@dataclass(frozen=True)
class Node:
    id: str
    hostname: str
    role: str  # manager | worker
    state: str  # ready | down | unknown
    availability: str  # active | pause | drain
    address: str
    labels: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_inspect(cls, data: dict[str, Any]) -> Node:
        spec, status = data.get("Spec") or {}, data.get("Status") or {}
        return cls(
            id=data["ID"],
            hostname=(data.get("Description") or {}).get("Hostname", ""),
            role=spec.get("Role", ""),
            state=status.get("State", ""),
            availability=spec.get("Availability", ""),
            address=status.get("Addr", ""),
            labels=dict(spec.get("Labels") or {}),
        )


@dataclass(frozen=True)
class Service:
    id: str
    name: str  # <namespace>_<service>
    namespace: str
    version: int  # the spec's version: changes on every update
    spec_digest: str  # SPEC_LABEL, "" when homelab did not deploy it
    image: str
    replicas: int  # desired (1 for replicated homelab services)
    update_state: str  # "" | updating | paused | completed | rollback_started | rollback_paused | rollback_completed
    update_message: str
    updated_at: str
    secrets: tuple[str, ...] = ()  # Swarm secrets and configs its spec and previous spec (rollback) use
    configs: tuple[str, ...] = ()

    @classmethod
    def from_inspect(cls, data: dict[str, Any]) -> Service:
        spec = data.get("Spec") or {}
        container = (spec.get("TaskTemplate") or {}).get("ContainerSpec") or {}
        labels = spec.get("Labels") or {}
        update = data.get("UpdateStatus") or {}
        mode = spec.get("Mode") or {}
        return cls(
            id=data["ID"],
            name=spec.get("Name", ""),
            namespace=labels.get(NAMESPACE_LABEL, ""),
            version=int((data.get("Version") or {}).get("Index", 0)),
            spec_digest=labels.get(SPEC_LABEL, ""),
            image=container.get("Image", "").split("@")[0],
            replicas=int((mode.get("Replicated") or {}).get("Replicas", 1)),
            update_state=update.get("State", ""),
            update_message=update.get("Message", ""),
            updated_at=data.get("UpdatedAt", ""),
            secrets=_names(data, "Secrets", "SecretName"),
            configs=_names(data, "Configs", "ConfigName"),
        )

    @property
    def service(self) -> str:
        return self.name.removeprefix(f"{self.namespace}_")


def _names(data: dict[str, Any], key: str, field: str) -> tuple[str, ...]:
    """Names of the secrets or configs a service's spec uses, and its previous spec: a rollback needs them."""
    names = []
    for spec in (data.get("Spec") or {}, data.get("PreviousSpec") or {}):
        container = (spec.get("TaskTemplate") or {}).get("ContainerSpec") or {}
        names += [ref[field] for ref in container.get(key) or []]
    return tuple(dict.fromkeys(names))


@dataclass(frozen=True)
class Task:
    id: str
    service_id: str
    node_id: str
    desired: str  # running | shutdown | ...
    state: str  # new | pending | assigned | ... | starting | running | failed | rejected | shutdown
    message: str
    error: str
    updated_at: str
    spec_digest: str  # SPEC_LABEL of the task's container: which deployed spec it runs

    @classmethod
    def from_inspect(cls, data: dict[str, Any]) -> Task:
        status = data.get("Status") or {}
        return cls(
            id=data["ID"],
            service_id=data.get("ServiceID", ""),
            node_id=data.get("NodeID", ""),
            desired=data.get("DesiredState", ""),
            state=status.get("State", ""),
            message=status.get("Message", ""),
            error=status.get("Err", ""),
            updated_at=data.get("UpdatedAt", ""),
            spec_digest=(((data.get("Spec") or {}).get("ContainerSpec") or {}).get("Labels") or {}).get(SPEC_LABEL, ""),
        )


class JobNotStarted(CommandFailed):
    """A one-shot job no node started before its deadline (no node may take it, or its node is down)."""


class Swarm(Protocol):
    def state(self) -> SwarmState: ...
    def nodes(self) -> list[Node]: ...
    def label_node(self, node: str, labels: Mapping[str, str]) -> None: ...
    def services(self, namespaces: Iterable[str] | None = None) -> list[Service]: ...
    def tasks(self, service_ids: Sequence[str]) -> list[Task]: ...
    def deploy(self, namespace: str, files: Sequence[Path], env: Mapping[str, str]) -> None: ...
    def remove_services(self, names: Sequence[str]) -> None: ...
    def remove_stack(self, namespace: str) -> str: ...
    def leftovers(self, namespace: str) -> list[str]: ...
    def objects(self, kind: str, namespace: str) -> list[str]: ...
    def remove_objects(self, kind: str, names: Sequence[str]) -> None: ...
    def logs_argv(self, name: str, *, follow: bool, tail: str) -> list[str]: ...
    def logs_tail(self, name: str, count: int) -> str: ...
    def subnets(self, network: str) -> list[str]: ...
    def run_job(self, name: str, image: str, constraints: Sequence[str], script: str, *, timeout: float) -> str: ...


class SwarmCli:
    """The real thing: the `docker` CLI against this engine (a manager of the swarm)."""

    def __init__(self, docker: str = "docker") -> None:
        self.docker = docker

    def _run(self, *args: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return process.run([self.docker, *args], check=check, timeout=timeout)

    def state(self) -> SwarmState:
        proc = self._run("info", "--format", "{{json .Swarm}}")
        info = json.loads(proc.stdout or "{}")
        return SwarmState(info.get("LocalNodeState", ""), bool(info.get("ControlAvailable")), info.get("NodeID", ""))

    def nodes(self) -> list[Node]:
        ids = self._run("node", "ls", "-q").stdout.split()
        if not ids:
            return []
        return [Node.from_inspect(item) for item in json.loads(self._run("node", "inspect", *ids).stdout)]

    def label_node(self, node: str, labels: Mapping[str, str]) -> None:
        args = [arg for key, value in sorted(labels.items()) for arg in ("--label-add", f"{key}={value}")]
        self._run("node", "update", *args, node)

    def services(self, namespaces: Iterable[str] | None = None) -> list[Service]:
        """Services of the given stacks (all stacks when none are named)."""
        wanted = set(namespaces) if namespaces is not None else None
        ids = self._run("service", "ls", "-q", "--filter", f"label={NAMESPACE_LABEL}").stdout.split()
        if not ids:
            return []
        proc = self._run("service", "inspect", *ids, check=False)  # one may vanish between ls and inspect
        found = [Service.from_inspect(item) for item in json.loads(proc.stdout or "[]")]
        return [s for s in found if wanted is None or s.namespace in wanted]

    def tasks(self, service_ids: Sequence[str]) -> list[Task]:
        if not service_ids:
            return []
        ids = self._run("service", "ps", "-q", "--no-trunc", *service_ids, check=False).stdout.split()
        if not ids:
            return []
        proc = self._run("inspect", "--type", "task", *ids, check=False)
        return [Task.from_inspect(item) for item in json.loads(proc.stdout or "[]")]

    def deploy(self, namespace: str, files: Sequence[Path], env: Mapping[str, str]) -> None:
        """`stack deploy` of the files (merged in order). Images are not resolved against a registry:
        the image each node has under the tag runs (homelab pins tags; `images check` reads them)."""
        argv = [self.docker, "stack", "deploy", "--resolve-image", "never", "--detach=true"]
        argv += [arg for f in files for arg in ("-c", str(f))]
        process.run([*argv, namespace], env=dict(env), timeout=300)

    def remove_services(self, names: Sequence[str]) -> None:
        if names:
            self._run("service", "rm", *names)

    def remove_stack(self, namespace: str) -> str:
        """`stack rm`; "" when the engine took everything, else its complaint (e.g. a network still used by
        a task that is stopping: Swarm stops the tasks after removing the services)."""
        proc = self._run("stack", "rm", namespace, check=False, timeout=120)
        return "" if proc.returncode == 0 else (proc.stderr or proc.stdout).strip()

    def leftovers(self, namespace: str) -> list[str]:
        """What of a removed stack still exists (Swarm removes tasks and networks after `stack rm`
        returns); empty when it is gone."""
        label = f"label={NAMESPACE_LABEL}={namespace}"
        left = self._run("service", "ls", "-q", "--filter", label, check=False).stdout.split()
        left += self._run("network", "ls", "-q", "--filter", label, check=False).stdout.split()
        out = self._run("ps", "-aq", "--filter", f"label={NAMESPACE_LABEL}={namespace}", check=False).stdout
        return left + out.split()

    def objects(self, kind: str, namespace: str) -> list[str]:
        """Names of the stack's secrets or configs (`kind`: secret | config)."""
        label = f"label={NAMESPACE_LABEL}={namespace}"
        return self._run(kind, "ls", "--filter", label, "--format", "{{.Name}}").stdout.split()

    def remove_objects(self, kind: str, names: Sequence[str]) -> None:
        """Remove secrets or configs; one still used by a task stays (the engine refuses, we move on)."""
        if names:
            self._run(kind, "rm", *names, check=False)

    def logs_argv(self, name: str, *, follow: bool, tail: str) -> list[str]:
        argv = [self.docker, "service", "logs", "--no-task-ids", "--tail", tail]
        return [*argv, "-f", name] if follow else [*argv, name]

    def logs_tail(self, name: str, count: int) -> str:
        """The service's last `count` lines of output from each task, as its containers wrote them."""
        argv = ["service", "logs", "--raw", "--no-task-ids", "--tail", str(count), name]
        proc = self._run(*argv, check=False, timeout=30)
        return proc.stdout + proc.stderr if proc.returncode == 0 else ""  # the containers' stderr is the CLI's

    def subnets(self, network: str) -> list[str]:
        """The subnets of a network of this engine (IPAM config); empty when there is no such network."""
        proc = self._run("network", "inspect", network, "--format", "{{json .IPAM.Config}}", check=False)
        if proc.returncode != 0:
            return []
        return [c["Subnet"] for c in json.loads(proc.stdout or "null") or [] if c.get("Subnet")]

    def run_job(self, name: str, image: str, constraints: Sequence[str], script: str, *, timeout: float) -> str:
        """Run `script` (/bin/sh, as root) once on a node the constraints choose, with the node's / at
        JOB_ROOT, and return its output: files on that node, whichever node homelab runs on. A one-shot
        service (mode replicated-job), removed after; CommandFailed with Swarm's or the script's error."""
        argv = [self.docker, "service", "create", "--detach", "--name", name, "--mode", "replicated-job"]
        argv += ["--restart-condition", "none", "--label", f"{JOB_LABEL}=1", "--user", "0:0", "--no-resolve-image"]
        argv += [arg for c in constraints for arg in ("--constraint", c)]
        argv += ["--mount", f"type=bind,source=/,target={JOB_ROOT}", "--entrypoint", "/bin/sh"]
        argv += [image, "-c", script]
        self._run("service", "rm", name, check=False)  # a job a killed homelab left
        process.run(argv, timeout=60)
        try:
            state, error = self._job_state(name, time.monotonic() + timeout)
            out = self._run("service", "logs", "--raw", "--no-task-ids", name, check=False, timeout=60).stdout
        finally:
            self._run("service", "rm", name, check=False)
        if state != "complete":
            failure = JobNotStarted if state not in ENDED else CommandFailed
            raise failure(argv, 1, out, f"job {name} {state}: {error or 'no error given'}")
        return out

    def _job_state(self, name: str, deadline: float) -> tuple[str, str]:
        """The job's task state once it ended (complete | failed | rejected...) with its error; at the
        deadline, its state then with the scheduler's reason (e.g. pending: no suitable node)."""
        while True:
            ids = self._run("service", "ps", "-q", "--no-trunc", name, check=False).stdout.split()
            found = json.loads(self._run("inspect", "--type", "task", *ids, check=False).stdout or "[]") if ids else []
            tasks = [Task.from_inspect(t) for t in found]
            ended = [t for t in tasks if t.state in ENDED]
            if ended or time.monotonic() >= deadline:
                last = max(ended or tasks, key=lambda t: t.updated_at, default=None)
                return (last.state, last.error or last.message) if last else ("not scheduled", "")
            time.sleep(0.5)
