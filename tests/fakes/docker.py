"""An in-memory Docker Engine + Compose behind homelab.runtime.docker.Engine that records every call.

`up` does what compose does to the fake's containers: each service of the stack's compose.yaml (read
from the stack folder) gets a running container stamped with the hash `hashes[project][service]`
(recreated when that hash changed or the service is in force_recreate), with the file's image and
environment. Steer it with:
`hashes` (what `config --hash` answers), `health[service]` / `states[service]` (what a container gets at
up; running and healthy unless said), `ends[service]` (more container fields it gets at up, e.g. an OOM
kill's exit code), `up_error[project]` (an exception up raises), `logs[container id]`,
`local_images` (reference -> image id), `memory[container id]` (bytes in use), `version = None` (engine
unreachable), `exec_output[service]` / `exec_error[service]` (what `exec_to_file` writes or raises),
`exec_answer[service]` (what `exec_from_file` prints).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path

import yaml

from homelab.errors import CommandFailed, EnvironmentProblem
from homelab.layout import PROJECT_PREFIX
from homelab.runtime.docker import Container

COMPOSE = (["docker", "compose"], (2, 30, 3))
_ids = itertools.count(1)


def container(project: str, service: str, **fields: object) -> Container:
    """A running, healthy container of one compose service; override any field."""
    base = Container(
        id=f"c{next(_ids):04d}",
        name=f"{project}-{service}-1",
        project=project,
        service=service,
        state="running",
        health="healthy",
        health_output="",
        exit_code=0,
        config_hash=f"hash-{service}",
        image=f"{service}:latest",
        image_id=f"sha256:{service}",
        created="2026-11-20T10:00:00.123456789Z",
        started_at="2026-11-20T10:00:01Z",
        env=(),
        mounts=(),
        ports=(),
    )
    return replace(base, **fields)  # type: ignore[arg-type]


class FakeDocker:
    def __init__(self, *containers: Container) -> None:
        self.running: list[Container] = list(containers)
        self.calls: list[tuple[object, ...]] = []
        self.hashes: dict[str, dict[str, str]] = {}
        self.health: dict[str, str | None] = {}
        self.states: dict[str, str] = {}
        self.ends: dict[str, dict[str, object]] = {}
        self.up_error: dict[str, Exception] = {}
        self.logs: dict[str, str] = {}
        self.local_images: dict[str, str] = {}
        self.memory: dict[str, int] = {}  # container id -> bytes in use (`docker stats`)
        self.exec_output: dict[str, bytes] = {}
        self.exec_answer: dict[str, str] = {}  # what exec_from_file prints
        self.exec_error: dict[str, Exception] = {}
        self.version: str | None = "27.3.1"
        self.compose: tuple[list[str], tuple[int, ...]] | EnvironmentProblem = COMPOSE

    def server_version(self) -> str:
        self.calls.append(("server_version",))
        if self.version is None:
            raise CommandFailed(["docker", "version"], 1, "", "Cannot connect to the Docker daemon")
        return self.version

    def check(self) -> str:
        if self.version is None:
            raise EnvironmentProblem("Docker Engine not reachable: Cannot connect to the Docker daemon")
        self.compose_program()
        return self.version

    def compose_program(self) -> tuple[list[str], tuple[int, ...]]:
        if isinstance(self.compose, EnvironmentProblem):
            raise self.compose
        return self.compose

    def config_hashes_many(self, jobs: Sequence[tuple[str, Path, Path | None]]) -> list[dict[str, str]]:
        self.calls.append(("config_hashes", *(project for project, _, _ in jobs)))
        return [dict(self.hashes.get(project, {})) for project, _, _ in jobs]

    def up(
        self,
        project: str,
        stack_dir: Path,
        *,
        timeout: float,
        force_recreate: Iterable[str] = (),
        remove_orphans: bool = True,
    ) -> None:
        forced = sorted(force_recreate)
        self.calls.append(("up", project, *forced))
        if project in self.up_error:
            raise self.up_error[project]
        services = (yaml.safe_load((stack_dir / "compose.yaml").read_text()) or {}).get("services") or {}
        old = {c.service: c for c in self.running if c.project == project}
        kept = [c for c in self.running if c.project != project]
        for service in services:
            wanted = self.hashes.get(project, {}).get(service, f"hash-{service}")
            current = old.get(service)
            if current and current.config_hash == wanted and service not in forced and current.running:
                kept.append(current)
                continue
            state, health = self.states.get(service, "running"), self.health.get(service, "healthy")
            spec = services[service] or {}
            env = tuple(f"{k}={str(v).replace('$$', '$')}" for k, v in (spec.get("environment") or {}).items())
            image = spec.get("image", f"{service}:latest")
            fields = {"config_hash": wanted, "state": state, "health": health, "image": image, "env": env}
            kept.append(container(project, service, **{**fields, **self.ends.get(service, {})}))
        if not remove_orphans:
            kept += [c for s, c in old.items() if s not in services]
        self.running = kept

    def down(self, project: str, stack_dir: Path | None, timeout: float = 300) -> None:
        self.calls.append(("down", project, stack_dir))
        self.running = [c for c in self.running if c.project != project]

    def exec_to_file(
        self, project: str, stack_dir: Path, service: str, argv: Sequence[str], dest: Path, *, timeout: float
    ) -> None:
        self.calls.append(("exec", project, service, *argv))
        if service in self.exec_error:
            raise self.exec_error[service]
        dest.write_bytes(self.exec_output.get(service, f"-- output of {' '.join(argv)}\n".encode()))
        dest.chmod(0o600)

    def exec_from_file(
        self, project: str, stack_dir: Path, service: str, argv: Sequence[str], source: Path, *, timeout: float
    ) -> str:
        self.calls.append(("exec<", project, service, *argv, source.read_bytes()))
        if service in self.exec_error:
            raise self.exec_error[service]
        return self.exec_answer.get(service, "")

    def logs_argv(self, project: str, stack_dir: Path | None, service: str, *, follow: bool, tail: str) -> list[str]:
        return [*COMPOSE[0], "-p", project, "logs", "--no-color", "--tail", tail, *(["-f"] if follow else []), service]

    def logs_tail(self, container_id: str, count: int) -> str:
        self.calls.append(("logs_tail", container_id, count))
        return self.logs.get(container_id, "")

    def containers(self, projects: Iterable[str] | None = None) -> list[Container]:
        wanted = set(projects) if projects is not None else None
        self.calls.append(("containers", *sorted(wanted or ())))
        return [
            c for c in self.running if c.project.startswith(PROJECT_PREFIX) and (wanted is None or c.project in wanted)
        ]

    def image_ids(self, refs: Iterable[str]) -> dict[str, str]:
        refs = sorted(set(refs))
        self.calls.append(("image_ids", *refs))
        return {r: self.local_images[r] for r in refs if r in self.local_images}

    def memory_usage(self, ids: Sequence[str]) -> dict[str, int]:
        self.calls.append(("memory_usage", *ids))
        return {cid: self.memory[cid] for cid in ids if cid in self.memory}

    def changes(self) -> list[tuple[object, ...]]:
        return [c for c in self.calls if c[0] in ("up", "down")]
