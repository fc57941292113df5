"""The Docker Engine + Compose driver: every `docker`/`docker compose` call homelab makes goes through here.

Each stack is one Compose project (`homelab-<stack>`) whose file is `stacks/<stack>/compose.yaml`
(plus `compose.override.yaml` next to it when the user keeps one: compose's own convention for local
tweaks). What runs is read from the engine (`docker ps` + `docker inspect`), never remembered.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from homelab.errors import CommandFailed, EnvironmentProblem
from homelab.layout import PROJECT_PREFIX
from homelab.runtime import process
from homelab.runtime.compose import compose_command

log = logging.getLogger("homelab.docker")

PROJECT_LABEL = "com.docker.compose.project"
SERVICE_LABEL = "com.docker.compose.service"
HASH_LABEL = "com.docker.compose.config-hash"
OVERRIDE = "compose.override.yaml"


@dataclass(frozen=True)
class Container:
    """One container as the engine reports it (the fields homelab decides and reports on)."""

    id: str
    name: str
    project: str
    service: str
    state: str  # created | running | restarting | exited | paused | dead
    health: str | None  # starting | healthy | unhealthy | None (no healthcheck)
    health_output: str  # the last health probe's output ("" when none)
    exit_code: int
    config_hash: str | None
    image: str  # the reference the container was created from
    image_id: str
    created: str
    started_at: str
    env: tuple[str, ...]
    mounts: tuple[dict[str, Any], ...]
    ports: tuple[str, ...]  # "hostip:hostport->containerport/proto"
    oom_killed: bool = False  # the engine's State.OOMKilled: the kernel killed it at its memory limit
    restart_count: int = 0  # restarts by its restart policy since it was created
    memory_limit: int = 0  # bytes; 0 = none

    @property
    def running(self) -> bool:
        return self.state == "running"

    @classmethod
    def from_inspect(cls, data: dict[str, Any]) -> Container:
        config, state = data.get("Config") or {}, data.get("State") or {}
        labels = config.get("Labels") or {}
        health = state.get("Health") or None
        probes = (health or {}).get("Log") or []
        host = data.get("HostConfig") or {}
        return cls(
            id=data["Id"],
            name=data.get("Name", "").lstrip("/"),
            project=labels.get(PROJECT_LABEL, ""),
            service=labels.get(SERVICE_LABEL, ""),
            state=state.get("Status", "unknown"),
            health=health.get("Status") if health else None,
            health_output=(probes[-1].get("Output") or "").strip() if probes else "",
            exit_code=int(state.get("ExitCode") or 0),
            config_hash=labels.get(HASH_LABEL),
            image=config.get("Image", ""),
            image_id=data.get("Image", ""),
            created=data.get("Created", ""),
            started_at=state.get("StartedAt", ""),
            env=tuple(config.get("Env") or ()),
            mounts=tuple(data.get("Mounts") or ()),
            ports=_port_bindings(host),
            oom_killed=bool(state.get("OOMKilled")),
            restart_count=int(data.get("RestartCount") or 0),
            memory_limit=int(host.get("Memory") or 0),
        )


def _port_bindings(host_config: dict[str, Any]) -> tuple[str, ...]:
    ports = []
    for container_port, bindings in sorted((host_config.get("PortBindings") or {}).items()):
        for binding in bindings or []:
            host_ip = binding.get("HostIp") or "0.0.0.0"  # noqa: S104 - what docker means by ""
            ports.append(f"{host_ip}:{binding.get('HostPort')}->{container_port}")
    return tuple(ports)


class Engine(Protocol):
    """What homelab asks of the Docker Engine and Compose. `Docker` is the real one; tests use
    tests/fakes/docker.FakeDocker."""

    def server_version(self) -> str: ...
    def check(self) -> str: ...
    def compose_program(self) -> tuple[list[str], tuple[int, ...]]: ...
    def config_hashes_many(self, jobs: Sequence[tuple[str, Path, Path | None]]) -> list[dict[str, str]]: ...
    def up(
        self,
        project: str,
        stack_dir: Path,
        *,
        timeout: float,
        force_recreate: Iterable[str] = (),
        remove_orphans: bool = True,
    ) -> None: ...
    def down(self, project: str, stack_dir: Path | None, timeout: float = 300) -> None: ...
    def exec_to_file(
        self, project: str, stack_dir: Path, service: str, argv: Sequence[str], dest: Path, *, timeout: float
    ) -> None: ...
    def exec_from_file(
        self, project: str, stack_dir: Path, service: str, argv: Sequence[str], source: Path, *, timeout: float
    ) -> str: ...
    def logs_argv(
        self, project: str, stack_dir: Path | None, service: str, *, follow: bool, tail: str
    ) -> list[str]: ...
    def logs_tail(self, container_id: str, count: int) -> str: ...
    def containers(self, projects: Iterable[str] | None = None) -> list[Container]: ...
    def image_ids(self, refs: Iterable[str]) -> dict[str, str]: ...
    def memory_usage(self, ids: Sequence[str]) -> dict[str, int]: ...


class Docker:
    """Talks to one engine through the `docker` CLI and compose v2. Cheap to create; checks lazily."""

    def __init__(self, docker: str = "docker") -> None:
        self.docker = docker
        self._compose: list[str] | None = None

    # --- preflight -------------------------------------------------------------------------------

    def server_version(self) -> str:
        """The engine's version; CommandFailed when the CLI is missing (exit 127) or the engine does not
        answer."""
        proc = process.run([self.docker, "version", "--format", "{{.Server.Version}}"], check=False, timeout=30)
        if proc.returncode != 0 or not proc.stdout.strip():
            raise CommandFailed.from_process(proc, [])
        return proc.stdout.strip()

    def check(self) -> str:
        """Engine reachable and compose v2 present, else EnvironmentProblem in one line. Returns the
        engine version."""
        try:
            version = self.server_version()
        except CommandFailed as exc:
            if exc.returncode == 127:
                raise EnvironmentProblem(
                    "docker CLI not found: install Docker Engine (docker.io or docker-ce)"
                ) from None
            raise EnvironmentProblem(f"Docker Engine not reachable: {_last_line(exc.stderr) or 'no answer'}") from None
        self.compose_argv()
        return version

    def compose_program(self) -> tuple[list[str], tuple[int, ...]]:
        """The compose argv prefix and its version; EnvironmentProblem when none fits."""
        return compose_command()

    def compose_argv(self) -> list[str]:
        if self._compose is None:
            self._compose = self.compose_program()[0]
        return self._compose

    # --- compose ---------------------------------------------------------------------------------

    def compose_files(self, stack_dir: Path, compose_file: Path | None = None) -> list[str]:
        files = ["-f", str(compose_file or stack_dir / "compose.yaml")]
        if (stack_dir / OVERRIDE).is_file():
            files += ["-f", str(stack_dir / OVERRIDE)]
        return files

    def compose(
        self,
        project: str,
        stack_dir: Path | None,
        *args: str,
        compose_file: Path | None = None,
        timeout: float | None = 120,
        check: bool = True,
    ) -> subprocess.CompletedProcess[str]:
        argv = [*self.compose_argv(), "-p", project]
        if stack_dir is not None and (compose_file or (stack_dir / "compose.yaml").is_file()):
            argv += ["--project-directory", str(stack_dir), *self.compose_files(stack_dir, compose_file)]
        return process.run([*argv, *args], check=check, timeout=timeout)

    def config_hashes(self, project: str, stack_dir: Path, compose_file: Path | None = None) -> dict[str, str]:
        """service -> the hash compose will stamp on its container (`config --hash`)."""
        proc = self.compose(project, stack_dir, "config", "--hash", "*", compose_file=compose_file, timeout=60)
        hashes = {}
        for line in proc.stdout.splitlines():
            name, _, digest = line.strip().rpartition(" ")
            if name:
                hashes[name] = digest
        return hashes

    def config_hashes_many(self, jobs: Sequence[tuple[str, Path, Path | None]]) -> list[dict[str, str]]:
        """config --hash for several stacks at once (each is a separate compose process)."""
        if len(jobs) <= 1:
            return [self.config_hashes(*job) for job in jobs]
        with ThreadPoolExecutor(max_workers=min(4, len(jobs))) as pool:
            return list(pool.map(lambda job: self.config_hashes(*job), jobs))

    def up(
        self,
        project: str,
        stack_dir: Path,
        *,
        timeout: float,
        force_recreate: Iterable[str] = (),
        remove_orphans: bool = True,
    ) -> None:
        """`up -d --wait` for the whole project; services in `force_recreate` are recreated first
        (compose's hash does not cover the contents of mounted files and secrets).
        Raises CommandFailed, or TimeoutError when compose itself did not return in time."""
        forced = sorted(set(force_recreate))
        wait = str(max(1, int(timeout)))
        try:
            if forced:
                self.compose(
                    project,
                    stack_dir,
                    "up",
                    "-d",
                    "--no-deps",
                    "--force-recreate",
                    *forced,
                    timeout=timeout + 30,
                )
            args = ["up", "-d", "--wait", "--wait-timeout", wait]
            if remove_orphans:
                args.append("--remove-orphans")
            self.compose(project, stack_dir, *args, timeout=timeout + 15)
        except subprocess.TimeoutExpired as exc:
            raise TimeoutError(f"compose did not finish within {timeout:.0f}s") from exc

    def down(self, project: str, stack_dir: Path | None, timeout: float = 300) -> None:
        """Stop and remove the project's containers and networks; volumes and bind mounts are kept."""
        self.compose(project, stack_dir, "down", "--remove-orphans", timeout=timeout)

    def exec_to_file(
        self, project: str, stack_dir: Path, service: str, argv: Sequence[str], dest: Path, *, timeout: float
    ) -> None:
        """`compose exec -T SERVICE ARGV...` in the running container, its output streamed into `dest`
        (0600, synced, through a temporary file renamed over it: a failed run leaves no half file).
        CommandFailed carries the program's stderr."""
        full = self._exec_argv(project, stack_dir, service, argv)
        tmp = dest.with_name(f".{dest.name}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            with os.fdopen(fd, "wb") as handle:
                proc = subprocess.run(
                    full, stdout=handle, stderr=subprocess.PIPE, text=False, timeout=timeout, check=False
                )
                handle.flush()
                os.fsync(handle.fileno())
            if proc.returncode != 0:
                raise CommandFailed(full, proc.returncode, "", proc.stderr.decode(errors="replace"))
            tmp.replace(dest)
        finally:
            tmp.unlink(missing_ok=True)

    def _exec_argv(self, project: str, stack_dir: Path, service: str, argv: Sequence[str]) -> list[str]:
        full = [*self.compose_argv(), "-p", project, "--project-directory", str(stack_dir)]
        return [*full, *self.compose_files(stack_dir), "exec", "-T", service, *argv]

    def exec_from_file(
        self, project: str, stack_dir: Path, service: str, argv: Sequence[str], source: Path, *, timeout: float
    ) -> str:
        """`compose exec -T SERVICE ARGV...` reading `source` (UTF-8 text: a dump fed to psql); its output."""
        return process.run(
            self._exec_argv(project, stack_dir, service, argv), input=source.read_text("utf-8"), timeout=timeout
        ).stdout

    def logs_argv(self, project: str, stack_dir: Path | None, service: str, *, follow: bool, tail: str) -> list[str]:
        argv = [*self.compose_argv(), "-p", project]
        if stack_dir is not None and (stack_dir / "compose.yaml").is_file():
            argv += ["--project-directory", str(stack_dir), *self.compose_files(stack_dir)]
        argv += ["logs", "--no-color", "--tail", tail]
        if follow:
            argv.append("-f")
        return [*argv, service]

    def logs_tail(self, container_id: str, count: int) -> str:
        """The container's last `count` lines of output (stdout then stderr), "" when there are none."""
        proc = process.run([self.docker, "logs", "--tail", str(count), container_id], check=False, timeout=30)
        return (proc.stdout + proc.stderr).strip()

    # --- engine state ----------------------------------------------------------------------------

    def containers(self, projects: Iterable[str] | None = None) -> list[Container]:
        """Every container (running or not) of the given compose projects; all homelab-* projects
        when none are named. Two engine calls whatever the number of stacks."""
        wanted = set(projects) if projects is not None else None
        proc = process.run(
            [
                self.docker,
                "ps",
                "-a",
                "--no-trunc",
                "--filter",
                f"label={PROJECT_LABEL}",
                "--format",
                '{{.ID}} {{.Label "' + PROJECT_LABEL + '"}}',
            ],
            timeout=60,
        )
        ids = []
        for line in proc.stdout.splitlines():
            cid, _, project = line.strip().partition(" ")
            if project.startswith(PROJECT_PREFIX) and (wanted is None or project in wanted):
                ids.append(cid)
        return self.inspect(ids)

    def inspect(self, ids: Sequence[str]) -> list[Container]:
        if not ids:
            return []
        proc = process.run([self.docker, "inspect", "--type", "container", *ids], check=False, timeout=60)
        if proc.returncode != 0 and not proc.stdout.strip():  # a container vanished between ps and inspect
            return [c for cid in ids for c in self.inspect_one(cid)]
        return [Container.from_inspect(item) for item in json.loads(proc.stdout or "[]")]

    def inspect_one(self, cid: str) -> list[Container]:
        proc = process.run([self.docker, "inspect", "--type", "container", cid], check=False, timeout=30)
        return (
            [Container.from_inspect(item) for item in json.loads(proc.stdout or "[]")] if proc.returncode == 0 else []
        )

    def memory_usage(self, ids: Sequence[str]) -> dict[str, int]:
        """container id -> memory in use (bytes, as `docker stats` counts it), for the running ones."""
        running = list(ids)
        if not running:
            return {}
        fmt = "{{.ID}} {{.MemUsage}}"
        proc = process.run(
            [self.docker, "stats", "--no-stream", "--no-trunc", "--format", fmt, *running], check=False, timeout=60
        )
        usage = {}
        for line in proc.stdout.splitlines():
            cid, _, used = line.partition(" ")
            with contextlib.suppress(ValueError):
                usage[cid] = _stats_bytes(used.split("/")[0])
        return usage

    def image_ids(self, refs: Iterable[str]) -> dict[str, str]:
        """image reference -> local image ID, for the references present locally."""
        refs = sorted(set(refs))
        if not refs:
            return {}
        proc = process.run([self.docker, "image", "inspect", "--format", "{{.Id}}", *refs], check=False, timeout=60)
        found = proc.stdout.split()
        if proc.returncode == 0 and len(found) == len(refs):
            return dict(zip(refs, found, strict=True))
        out = {}
        for ref in refs:  # some are missing locally: ask one by one
            one = process.run([self.docker, "image", "inspect", "--format", "{{.Id}}", ref], check=False, timeout=30)
            if one.returncode == 0 and one.stdout.strip():
                out[ref] = one.stdout.strip()
        return out

    # --- images (homelab images check) -------------------------------------------------------------

    def pull(self, ref: str, timeout: float = 600) -> None:
        """Pull one image; CommandFailed carries the registry's error."""
        process.run([self.docker, "pull", "--quiet", ref], timeout=timeout)

    def run_script(self, image: str, script: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """`/bin/sh -c SCRIPT` in a throwaway container of IMAGE, as the image's own user, no network."""
        argv = [self.docker, "run", "--rm", "--network", "none", "--entrypoint", "/bin/sh", image, "-c", script]
        return process.run(argv, check=False, timeout=timeout)


_STATS_UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}


def _stats_bytes(text: str) -> int:
    """'12.5MiB' -> bytes: `docker stats` prints memory in binary units (go-units BytesSize)."""
    text = text.strip()
    unit = next((u for u in sorted(_STATS_UNITS, key=len, reverse=True) if text.endswith(u)), None)
    if unit is None:
        raise ValueError(f"not a memory size: {text!r}")
    return int(float(text.removesuffix(unit)) * _STATS_UNITS[unit])


def _last_line(text: str) -> str:
    lines = [line.strip() for line in (text or "").strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def describe_failure(exc: CommandFailed) -> str:
    return _last_line(exc.stderr) or _last_line(exc.stdout) or f"exit {exc.returncode}"
