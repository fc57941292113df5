"""Plan, then apply: what `homelab up` will do to each service, decided before anything changes.

For every stack the convergence plan compares what compose *would* stamp on each container
(`docker compose config --hash`) with the `com.docker.compose.config-hash` label of the container
that runs now (compose v1's ConvergencePlan idea; not compose's own `up --dry-run`, which has
recreated containers: docker/compose#14029). On top of the hash, which does not cover file
contents, a service is recreated when a rendered file or secret it mounts changed, or when its
image tag now points at another image. Only stacks with something to do are handed to
`docker compose up -d --wait`, in dependency order; the first stack that does not become healthy
stops the run, naming the service and its last health check output.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import stat
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from homelab.errors import CommandFailed, ConfigError, HomelabError
from homelab.plan import Plan, Stack
from homelab.render.compose import SECRETS_DIR, project_name
from homelab.runtime import process
from homelab.runtime.compose import compose_command
from homelab.runtime.docker import OVERRIDE, PROJECT_PREFIX, Container, Docker, describe_failure

Action = Literal["create", "recreate", "start", "leave", "remove"]
DEFAULT_TIMEOUT = 300


class ApplyFailed(HomelabError):
    """A stack did not come up (a service never turned healthy, exited, or compose failed)."""

    exit_code = 1


@dataclass(frozen=True)
class ServiceAction:
    stack: str
    service: str
    action: Action
    reason: str = ""
    container: Container | None = None


@dataclass
class StackPlan:
    name: str
    directory: Path
    actions: list[ServiceAction] = field(default_factory=list)
    remove_stack: bool = False  # a homelab stack still running that the config no longer has

    @property
    def project(self) -> str:
        return f"{PROJECT_PREFIX}{self.name}"

    @property
    def changed(self) -> bool:
        return self.remove_stack or any(a.action != "leave" for a in self.actions)

    @property
    def forced(self) -> list[str]:
        """Services compose would leave alone (same hash) but that must be recreated."""
        return [
            a.service
            for a in self.actions
            if a.action == "recreate"
            and a.container is not None
            and a.container.config_hash
            and not a.reason.startswith("config changed")
        ]


@dataclass
class Convergence:
    stacks: list[StackPlan]

    @property
    def changed(self) -> bool:
        return any(s.changed for s in self.stacks)

    def actions(self, kind: Action | None = None) -> list[ServiceAction]:
        return [a for s in self.stacks for a in s.actions if kind is None or a.action == kind]


@dataclass
class ApplyResult:
    applied: list[str]  # stacks handed to compose
    removed: list[str]  # whole stacks taken down
    seconds: float


# --- selecting stacks ----------------------------------------------------------------------------


def select_stacks(plan: Plan, names: Iterable[str]) -> list[str]:
    """The named stacks in dependency order (all when none named). A stack routed through the edge
    needs the edge's proxy network, so naming it alone is fine once the edge has been applied."""
    names = list(names)
    unknown = [n for n in names if n not in plan.stacks]
    if unknown:
        raise ConfigError([f"unknown stack {n!r} (this config has: {', '.join(plan.stacks)})" for n in unknown])
    return [n for n in plan.stacks if not names or n in names]


# --- the convergence plan ------------------------------------------------------------------------


def converge(
    plan: Plan,
    out: Path,
    docker: Docker,
    stacks: list[str],
    *,
    changed_files: Iterable[str] = (),
    pending_compose: dict[str, bytes] | None = None,
    include_removed_stacks: bool = True,
) -> Convergence:
    """Decide create / recreate / start / leave / remove for every service of `stacks`.

    `changed_files` are paths (relative to `out`) this render wrote or will write; `pending_compose`
    maps a stack to compose.yaml bytes not yet on disk (`--dry-run`): their hashes are computed
    from a temporary copy resolved against the real stack folder, so they equal what `up` stamps.
    """
    changed = set(changed_files)
    pending = pending_compose or {}
    running = docker.containers()
    by_project: dict[str, list[Container]] = {}
    for c in running:
        by_project.setdefault(c.project, []).append(c)

    with tempfile.TemporaryDirectory(prefix="homelab-hash-") as tmp:
        jobs, job_stacks = [], []
        for name in stacks:
            if not by_project.get(project_name(plan.stacks[name])):
                continue  # nothing runs: everything is created, no hash needed
            compose_file = None
            if name in pending:
                compose_file = Path(tmp) / f"{name}.yaml"
                compose_file.write_bytes(pending[name])
            jobs.append((f"{PROJECT_PREFIX}{name}", out / name, compose_file))
            job_stacks.append(name)
        hashes = _cached_hashes(docker, out, jobs, job_stacks, save=not pending)

    image_refs = {c.image for c in running if c.project in {f"{PROJECT_PREFIX}{n}" for n in stacks}}
    images = docker.image_ids(image_refs) if image_refs else {}

    result = []
    for name in stacks:
        stack = plan.stacks[name]
        containers = {c.service: c for c in by_project.get(project_name(stack), [])}
        stack_plan = StackPlan(name, out / name)
        for service_name in stack.services:
            container = containers.get(service_name)
            action, reason = _decide(plan, stack, service_name, container, hashes.get(name, {}), images, changed)
            stack_plan.actions.append(ServiceAction(name, service_name, action, reason, container))
        for service_name, container in sorted(containers.items()):
            if service_name not in stack.services:
                stack_plan.actions.append(
                    ServiceAction(name, service_name, "remove", "no longer in the config", container)
                )
        result.append(stack_plan)
    if include_removed_stacks:
        wanted = {f"{PROJECT_PREFIX}{n}" for n in plan.stacks}
        for project in sorted(set(by_project) - wanted):
            name = project.removeprefix(PROJECT_PREFIX)
            stack_plan = StackPlan(name, out / name, remove_stack=True)
            stack_plan.actions = [
                ServiceAction(name, c.service, "remove", "stack no longer in the config", c)
                for c in by_project[project]
            ]
            result.append(stack_plan)
    return Convergence(result)


HASH_CACHE = ".homelab-hashes.json"


def _cached_hashes(
    docker: Docker, out: Path, jobs: list[tuple[str, Path, Path | None]], names: list[str], *, save: bool
) -> dict[str, dict[str, str]]:
    """`config --hash` per stack, memoized by everything compose reads to compute it (its own argv
    and version, the project folder, compose.yaml + override + .env bytes): a no-op `up` then
    starts no compose process at all. The hashes are still compose's own."""
    cache_file = out / HASH_CACHE
    try:
        cache = json.loads(cache_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        cache = {}
    result: dict[str, dict[str, str]] = {}
    missing = []
    keys = {}
    for name, job in zip(names, jobs, strict=True):
        keys[name] = _hash_key(docker, *job)
        entry = cache.get(name) or {}
        if entry.get("key") == keys[name]:
            result[name] = entry["hashes"]
        else:
            missing.append((name, job))
    if missing:
        computed = docker.config_hashes_many([job for _, job in missing])
        for (name, _), hashes in zip(missing, computed, strict=True):
            result[name] = hashes
            cache[name] = {"key": keys[name], "hashes": hashes}
        if save and out.is_dir():
            tmp = cache_file.with_name(f".{HASH_CACHE}.tmp")
            tmp.write_text(json.dumps(cache, indent=1, sort_keys=True) + "\n", encoding="utf-8")
            tmp.replace(cache_file)
    return result


def _hash_key(docker: Docker, project: str, stack_dir: Path, compose_file: Path | None) -> str:
    digest = hashlib.sha256()
    argv, version = compose_command()
    digest.update(json.dumps([argv, version, project, str(stack_dir.resolve())]).encode())
    for path in (compose_file or stack_dir / "compose.yaml", stack_dir / OVERRIDE, stack_dir / ".env"):
        try:
            digest.update(path.read_bytes())
        except FileNotFoundError:
            digest.update(b"\0absent")
    return digest.hexdigest()


def _decide(
    plan: Plan,
    stack: Stack,
    service_name: str,
    container: Container | None,
    hashes: dict[str, str],
    images: dict[str, str],
    changed: set[str],
) -> tuple[Action, str]:
    if container is None:
        return "create", "new"
    wanted = hashes.get(service_name)
    if wanted and container.config_hash != wanted:
        return "recreate", "config changed"
    service = stack.services[service_name]
    touched = _changed_inputs(stack, service_name, changed)
    if touched:
        return "recreate", f"{touched[0]} changed" + (f" (+{len(touched) - 1})" if len(touched) > 1 else "")
    local = images.get(container.image)
    if local and container.image_id and local != container.image_id:
        return "recreate", f"image {service.image} updated"
    if container.state != "running":
        return "start", container.state
    return "leave", container.health or "running"


def _changed_inputs(stack: Stack, service_name: str, changed: set[str]) -> list[str]:
    """Rendered files and secrets this service mounts that this render changed."""
    service = stack.services[service_name]
    hits = []
    for mount in service.mounts:
        if not mount.source.startswith("./"):
            continue
        rel = f"{stack.name}/{mount.source[2:]}"
        hits += sorted(p for p in changed if p == rel or p.startswith(rel.rstrip("/") + "/"))
    hits += [f"{SECRETS_DIR}/{name}" for name, _ in service.secrets if f"{SECRETS_DIR}/{name}" in changed]
    return hits


# --- the host side: dataset folders and acme.json ---------------------------------------------------


def prepare_host(plan: Plan, stacks: Iterable[str], *, zfs_datasets: set[str] | None = None) -> list[str]:
    """Create missing bind-mount sources for the stacks' datasets when they are plain folders (ZFS
    datasets are created and mounted by `homelab storage`), owned by the dataset's uid/gid, and
    acme.json as an empty 0600 file before the edge starts. Returns what it created."""
    wanted = set(stacks)
    owners = {e for s in wanted for e in _owners(plan, s)}
    created = []
    root = os.geteuid() == 0
    for dataset in plan.datasets:
        if dataset.owner not in owners or (zfs_datasets and dataset.name in zfs_datasets):
            continue
        path = Path(dataset.path)
        if not path.exists():
            path.mkdir(parents=True, mode=0o750)
            if root:
                os.chown(path, dataset.uid, dataset.gid)
            created.append(str(path))
    if "edge" in wanted and plan.config.edge.kind == "traefik":
        acme = acme_json(plan)
        if acme is not None:
            created += _ensure_acme_json(acme)
    return created


def _owners(plan: Plan, stack_name: str) -> set[str]:
    """Dataset owners (apps, or the stack itself) whose services live in this stack."""
    stack = plan.stacks.get(stack_name)
    if stack is None:
        return set()
    owners = {stack_name}
    owners |= {r.app for r in plan.routes if r.stack == stack_name}
    owners |= {
        d.owner for d in plan.datasets if any(m.source == d.path for s in stack.services.values() for m in s.mounts)
    }
    return owners


def acme_json(plan: Plan) -> Path | None:
    dataset = next((d for d in plan.datasets if d.key == "edge/acme"), None)
    return Path(dataset.path) / "acme.json" if dataset else None


def _ensure_acme_json(path: Path) -> list[str]:
    try:
        info = path.lstat()
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.close(fd)
        path.chmod(0o600)
        return [str(path)]
    if not stat.S_ISREG(info.st_mode):
        raise HomelabError(
            f"{path} is not a regular file (a missing bind source became a folder?): remove it and run up again"
        )
    if stat.S_IMODE(info.st_mode) != 0o600:
        path.chmod(0o600)  # Traefik refuses an acme.json readable by others
    return []


def zfs_dataset_names() -> set[str]:
    """Datasets ZFS knows (their folders are ZFS's business); empty when there is no zfs."""
    proc = process.run(["zfs", "list", "-H", "-o", "name"], check=False, timeout=30)
    return set(proc.stdout.split()) if proc.returncode == 0 else set()


# --- applying ------------------------------------------------------------------------------------


def apply(
    convergence: Convergence,
    plan: Plan,
    docker: Docker,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    progress: Callable[[str], None] = lambda _msg: None,
) -> ApplyResult:
    """Bring every changed stack up in order and wait for health; stop at the first failure."""
    start = time.monotonic()
    applied: list[str] = []
    removed: list[str] = []
    zfs = zfs_dataset_names()
    prepare_host(plan, [s.name for s in convergence.stacks if not s.remove_stack], zfs_datasets=zfs)
    todo = [s for s in convergence.stacks if s.changed]
    for index, stack in enumerate(todo):
        if stack.remove_stack:
            progress(f"{stack.name}: taking down (no longer in the config)")
            docker.down(stack.project, stack.directory if (stack.directory / "compose.yaml").is_file() else None)
            removed.append(stack.name)
            continue
        progress(f"{stack.name}: applying, waiting up to {timeout:.0f}s for health")
        began = time.monotonic()
        try:
            docker.up(stack.project, stack.directory, timeout=timeout, force_recreate=stack.forced)
        except (CommandFailed, TimeoutError) as exc:
            later = [s.name for s in todo[index + 1 :] if not s.remove_stack]
            raise diagnose(docker, stack, exc, time.monotonic() - began, later) from None
        # compose 2.40 can return 0 from `up --wait` while a dependency is unhealthy and its
        # dependents sit in "created": check every container ourselves before the next stack
        unhealthy = _wait_healthy(docker, stack, began + timeout)
        if unhealthy:
            later = [s.name for s in todo[index + 1 :] if not s.remove_stack]
            failure = TimeoutError(f"not healthy: {', '.join(unhealthy)}")
            raise diagnose(docker, stack, failure, time.monotonic() - began, later)
        progress(f"{stack.name}: healthy after {time.monotonic() - began:.1f}s")
        applied.append(stack.name)
    return ApplyResult(applied, removed, time.monotonic() - start)


def _wait_healthy(docker: Docker, stack: StackPlan, deadline: float) -> list[str]:
    """Services of the stack not running+healthy (or with no container at all: compose's exit code alone
    is not trusted); waits while some are still starting."""
    while True:
        containers = docker.containers([stack.project])
        starting = [c.service for c in containers if c.running and c.health == "starting"]
        bad = [c.service for c in containers if not c.running or c.health == "unhealthy"]
        bad += _missing(stack, containers)
        if bad or not starting or time.monotonic() >= deadline:
            return sorted(bad + starting)
        time.sleep(1)


def _missing(stack: StackPlan, containers: list[Container]) -> list[str]:
    present = {c.service for c in containers}
    return sorted({a.service for a in stack.actions if a.action != "remove"} - present)


def diagnose(docker: Docker, stack: StackPlan, exc: Exception, seconds: float, later: list[str]) -> ApplyFailed:
    """Turn a failed `up --wait` into: which service, what its last health check said, what waits."""
    containers = docker.containers([stack.project])
    bad = [
        c for c in containers if c.health in ("unhealthy", "starting") or c.state in ("exited", "dead", "restarting")
    ]
    not_started = sorted(c.service for c in containers if c.state == "created")
    lines = [
        f"stack {stack.name}: service {name} has no container (compose created none)"
        for name in _missing(stack, containers)
    ]
    for c in sorted(bad, key=lambda c: (c.health != "unhealthy", c.service)):
        if c.health in ("unhealthy", "starting"):
            verdict = "is unhealthy" if c.health == "unhealthy" else f"did not become healthy within {seconds:.0f}s"
            output = c.health_output or "(no output)"
            lines.append(f"stack {stack.name}: service {c.service} {verdict}; last health check: {output}")
        else:
            tail = _last_log_lines(docker, c)
            lines.append(
                f"stack {stack.name}: service {c.service} {c.state} (exit code {c.exit_code})"
                + (f"; last output: {tail}" if tail else "")
            )
    if not lines:
        reason = describe_failure(exc) if isinstance(exc, CommandFailed) else str(exc)
        lines.append(f"stack {stack.name}: docker compose up failed: {reason}")
    if not_started:
        lines.append(f"  not started (waiting on it): {', '.join(not_started)}")
    if later:
        lines.append(f"  stacks not applied: {', '.join(later)}")
    return ApplyFailed("\n".join(lines))


def _last_log_lines(docker: Docker, container: Container, count: int = 3) -> str:
    proc = process.run([docker.docker, "logs", "--tail", str(count), container.id], check=False, timeout=30)
    text = (proc.stdout + proc.stderr).strip()
    return " | ".join(line.strip() for line in text.splitlines()[-count:])


# --- down and status ------------------------------------------------------------------------------


def down(plan: Plan, out: Path, docker: Docker, stacks: list[str], progress: Callable[[str], None]) -> list[str]:
    """Take stacks down in reverse dependency order. Datasets, acme.json and secrets stay."""
    running = {c.project for c in docker.containers()}
    done = []
    for name in reversed(stacks):
        project = f"{PROJECT_PREFIX}{name}"
        if project not in running:
            continue
        directory = out / name
        progress(f"{name}: stopping")
        docker.down(project, directory if (directory / "compose.yaml").is_file() else None)
        done.append(name)
    return done


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


def status(plan: Plan, docker: Docker) -> list[ServiceStatus]:
    containers = {(c.project, c.service): c for c in docker.containers()}
    expiries = cert_expiries(plan)
    rows = []
    for stack in plan.stacks.values():
        for name, service in stack.services.items():
            c = containers.get((project_name(stack), name))
            route = plan.route_for(stack.name, name)
            url = (
                f"https://{route.host}"
                + ("" if plan.config.edge.https_port == 443 else f":{plan.config.edge.https_port}")
                if route
                else "-"
            )
            rows.append(
                ServiceStatus(
                    stack=stack.name,
                    service=name,
                    state=c.state if c else "absent",
                    health=(c.health or "-") if c else "-",
                    image=service.image,
                    url=url,
                    cert_expiry=expiries.get(route.host, "none yet") if route else "-",
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


def cert_expiries(plan: Plan) -> dict[str, str]:
    """host -> expiry date of the certificate Traefik holds for it in acme.json."""
    path = acme_json(plan) if plan.config.edge.kind == "traefik" else None
    try:
        data = json.loads(path.read_text(encoding="utf-8")) if path else {}
    except (OSError, ValueError):
        return {}
    out = {}
    for resolver in (data or {}).values():
        for cert in (resolver or {}).get("Certificates") or []:
            domain = cert.get("domain") or {}
            expiry = _pem_expiry(base64.b64decode(cert.get("certificate") or ""))
            for host in [domain.get("main"), *(domain.get("sans") or [])]:
                if host and expiry:
                    out[host] = expiry
    return out


def _pem_expiry(pem: bytes) -> str:
    if not pem:
        return ""
    try:
        from cryptography import x509

        cert = x509.load_pem_x509_certificate(pem)
        return cert.not_valid_after_utc.strftime("%Y-%m-%d")
    except ImportError:
        proc = process.run(["openssl", "x509", "-noout", "-enddate"], input=pem.decode(), check=False, timeout=10)
        return proc.stdout.strip().removeprefix("notAfter=") if proc.returncode == 0 else ""
    except ValueError:
        return ""
