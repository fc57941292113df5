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

import hashlib
import json
import tempfile
import time
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

from homelab.engine.health import diagnose, wait_healthy
from homelab.engine.host import prepare_host
from homelab.engine.model import Action, ApplyResult, Cause, Convergence, ServiceAction, StackPlan
from homelab.errors import CommandFailed
from homelab.layout import COMPOSE_FILE, PROJECT_PREFIX, SECRETS_DIR, project_name
from homelab.plan_model import Plan, Stack
from homelab.runtime.docker import OVERRIDE, Container, Engine
from homelab.runtime.zfs import Zfs, ZfsCli

DEFAULT_TIMEOUT = 300


# --- the convergence plan ------------------------------------------------------------------------


def converge(
    plan: Plan,
    out: Path,
    docker: Engine,
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
    running = docker.containers()
    by_project: dict[str, list[Container]] = {}
    for c in running:
        by_project.setdefault(c.project, []).append(c)
    live = [n for n in stacks if by_project.get(project_name(n))]  # nothing runs: no hash needed
    hashes = _stack_hashes(docker, out, live, pending_compose or {})
    image_refs = {c.image for c in running if c.project in {project_name(n) for n in stacks}}
    images = docker.image_ids(image_refs) if image_refs else {}

    result = []
    for name in stacks:
        stack = plan.stacks[name]
        containers = {c.service: c for c in by_project.get(project_name(name), [])}
        stack_plan = StackPlan(name, out / name)
        for service_name in stack.services:
            container = containers.get(service_name)
            action, cause, reason = _decide(stack, service_name, container, hashes.get(name, {}), images, changed)
            stack_plan.actions.append(ServiceAction(name, service_name, action, reason, container, cause))
        for service_name, container in sorted(containers.items()):
            if service_name not in stack.services:
                stack_plan.actions.append(
                    ServiceAction(name, service_name, "remove", "no longer in the config", container, "removed")
                )
        result.append(stack_plan)
    if include_removed_stacks:
        result += _removed_stacks(plan, out, by_project)
    return Convergence(result)


def _removed_stacks(plan: Plan, out: Path, by_project: dict[str, list[Container]]) -> list[StackPlan]:
    """homelab-* projects running that the config no longer has."""
    wanted = {project_name(n) for n in plan.stacks}
    result = []
    for project in sorted(set(by_project) - wanted):
        name = project.removeprefix(PROJECT_PREFIX)
        stack_plan = StackPlan(name, out / name, remove_stack=True)
        stack_plan.actions = [
            ServiceAction(name, c.service, "remove", "stack no longer in the config", c, "removed")
            for c in by_project[project]
        ]
        result.append(stack_plan)
    return result


def _stack_hashes(docker: Engine, out: Path, stacks: list[str], pending: dict[str, bytes]) -> dict[str, dict[str, str]]:
    """stack -> service -> the hash compose would stamp now (from `pending` bytes when given)."""
    with tempfile.TemporaryDirectory(prefix="homelab-hash-") as tmp:
        jobs: list[tuple[str, Path, Path | None]] = []
        for name in stacks:
            compose_file = None
            if name in pending:
                compose_file = Path(tmp) / f"{name}.yaml"
                compose_file.write_bytes(pending[name])
            jobs.append((project_name(name), out / name, compose_file))
        return _cached_hashes(docker, out, jobs, stacks, save=not pending)


HASH_CACHE = ".homelab-hashes.json"


def _cached_hashes(
    docker: Engine, out: Path, jobs: list[tuple[str, Path, Path | None]], names: list[str], *, save: bool
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


def _hash_key(docker: Engine, project: str, stack_dir: Path, compose_file: Path | None) -> str:
    digest = hashlib.sha256()
    argv, version = docker.compose_program()
    digest.update(json.dumps([argv, version, project, str(stack_dir.resolve())]).encode())
    for path in (compose_file or stack_dir / COMPOSE_FILE, stack_dir / OVERRIDE, stack_dir / ".env"):
        try:
            digest.update(path.read_bytes())
        except FileNotFoundError:
            digest.update(b"\0absent")
    return digest.hexdigest()


def _decide(
    stack: Stack,
    service_name: str,
    container: Container | None,
    hashes: dict[str, str],
    images: dict[str, str],
    changed: set[str],
) -> tuple[Action, Cause, str]:
    if container is None:
        return "create", "new", "new"
    wanted = hashes.get(service_name)
    if wanted and container.config_hash != wanted:
        return "recreate", "config", "config changed"
    service = stack.services[service_name]
    touched = _changed_inputs(stack, service_name, changed)
    if touched:
        more = f" (+{len(touched) - 1})" if len(touched) > 1 else ""
        return "recreate", "inputs", f"{touched[0]} changed{more}"
    local = images.get(container.image)
    if local and container.image_id and local != container.image_id:
        return "recreate", "image", f"image {service.image} updated"
    if container.state != "running":
        return "start", "stopped", container.state
    return "leave", "unchanged", container.health or "running"


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


# --- applying ------------------------------------------------------------------------------------


def apply(
    convergence: Convergence,
    plan: Plan,
    docker: Engine,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    progress: Callable[[str], None] = lambda _msg: None,
    zfs: Zfs | None = None,
    guard: Callable[[StackPlan], AbstractContextManager[None]] = lambda _stack: nullcontext(),
) -> ApplyResult:
    """Bring every changed stack up in order and wait for health; stop at the first failure.
    `guard` wraps each stack's step (homelab/upgrade/run.py: snapshot before, roll back on failure)."""
    start = time.monotonic()
    result = ApplyResult([], [], 0.0)
    datasets = zfs_dataset_names(zfs or ZfsCli())
    prepare_host(plan, [s.name for s in convergence.stacks if not s.remove_stack], zfs_datasets=datasets)
    todo = [s for s in convergence.stacks if s.changed]
    for index, stack in enumerate(todo):
        if stack.remove_stack:
            progress(f"{stack.name}: taking down (no longer in the config)")
            docker.down(stack.project, stack.directory if (stack.directory / COMPOSE_FILE).is_file() else None)
            result.removed.append(stack.name)
            continue
        later = [s.name for s in todo[index + 1 :] if not s.remove_stack]
        with guard(stack):
            up_healthy(docker, stack, timeout, later, progress)
        result.applied.append(stack.name)
    result.seconds = time.monotonic() - start
    return result


def up_healthy(
    docker: Engine, stack: StackPlan, timeout: float, later: list[str], progress: Callable[[str], None]
) -> None:
    """`up --wait` one stack, then the health gate; ApplyFailed naming what did not come up."""
    progress(f"{stack.name}: applying, waiting up to {timeout:.0f}s for health")
    began = time.monotonic()
    try:
        docker.up(stack.project, stack.directory, timeout=timeout, force_recreate=stack.forced)
    except (CommandFailed, TimeoutError) as exc:
        raise diagnose(docker, stack, exc, time.monotonic() - began, later) from None
    unhealthy = wait_healthy(docker, stack, began + timeout)
    if unhealthy:
        failure = TimeoutError(f"not healthy: {', '.join(unhealthy)}")
        raise diagnose(docker, stack, failure, time.monotonic() - began, later)
    progress(f"{stack.name}: healthy after {time.monotonic() - began:.1f}s")


def zfs_dataset_names(zfs: Zfs) -> set[str]:
    """Datasets ZFS knows (their folders are ZFS's business); empty when there is no zfs."""
    try:
        return set(zfs.names())
    except CommandFailed:
        return set()


# --- down ------------------------------------------------------------------------------------


def down(plan: Plan, out: Path, docker: Engine, stacks: list[str], progress: Callable[[str], None]) -> list[str]:
    """Take stacks down in reverse dependency order. Datasets, acme.json and secrets stay."""
    running = {c.project for c in docker.containers()}
    done = []
    for name in reversed(stacks):
        project = project_name(name)
        if project not in running:
            continue
        directory = out / name
        progress(f"{name}: stopping")
        docker.down(project, directory if (directory / COMPOSE_FILE).is_file() else None)
        done.append(name)
    return done
