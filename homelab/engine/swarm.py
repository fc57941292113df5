"""Plan, then apply, on Docker Swarm: what `homelab up` will do to each service, decided before anything changes.

`docker stack deploy` sends every service of the file to the manager, which bumps each one's version even
when nothing changed. So homelab decides itself: each service's digest covers its entry in stack.yaml,
its entry in a `stack.override.yaml` kept next to it, and the content of the secrets it uses (configs are
already named by their content); the digest is stamped on the service and its containers as a label. Only services whose
digest differs are deployed, as a stack file holding just them (`stack deploy` leaves the services a file
does not name alone). Then the health gate waits until every deployed service runs the spec it was given
on all its replicas (Swarm starts a task with a health check as running only once it is healthy), and
fails when Swarm rolled the update back (the label is the old digest again) or cannot place a task.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from homelab.engine.compose import zfs_dataset_names
from homelab.engine.health import ApplyFailed
from homelab.engine.model import ApplyResult, Convergence, ServiceAction, StackPlan
from homelab.engine.swarm_files import JOB_TIMEOUT, prepare_on_nodes
from homelab.errors import CommandFailed
from homelab.layout import EDGE_STACK, PROJECT_PREFIX, SECRETS_DIR, STACK_FILE, project_name
from homelab.plan_model import Plan
from homelab.render.swarm_stack import content_digest, digest_variable
from homelab.render.yamldump import dump
from homelab.runtime.docker import Engine
from homelab.runtime.swarm import SPEC_LABEL, Node, Service, Swarm, Task
from homelab.runtime.zfs import Zfs, ZfsCli
from homelab.yamlio import safe_load

OVERRIDE = "stack.override.yaml"  # the user's local tweaks, merged by `stack deploy` (compose's convention)
DEPLOY_FILE = ".homelab-deploy.yaml"  # the services being deployed, next to stack.yaml (relative paths hold)
DEPLOY_OVERRIDE = ".homelab-deploy.override.yaml"
# In the stacks folder while homelab's stacks run on Swarm: `up` on compose takes them down first. A file
# (not `docker service ls`) so a compose `up` asks the engine nothing more; `render` leaves it alone.
SWARM_MARK = ".homelab-swarm"
POLL_SECONDS = 1.0
FAILED_UPDATE = ("paused", "rollback_paused", "rollback_completed")


@dataclass
class Desired:
    """One stack as it should run: its stack file, the user's override, secret digests, service digests."""

    stack: str
    directory: Path
    document: dict[str, Any]
    override: dict[str, Any]
    env: dict[str, str]  # HOMELAB_DIGEST_* for the stack file's secret names
    digests: dict[str, str]  # service -> digest

    @property
    def namespace(self) -> str:
        return project_name(self.stack)


def desired(plan: Plan, out: Path, files: dict[str, bytes], stacks: list[str]) -> dict[str, Desired]:
    """The stacks' wanted state, from this render's stack files and the secrets folder."""
    result = {}
    for name in stacks:
        directory = out / name
        document = safe_load(files[f"{name}/{STACK_FILE}"].decode()) or {}
        override_path = directory / OVERRIDE
        override = (safe_load(override_path.read_text(encoding="utf-8")) or {}) if override_path.is_file() else {}
        secrets = {s: _secret_digest(out / SECRETS_DIR / s) for s in document.get("secrets", {})}
        digests = {service: _service_digest(document, override, service, secrets) for service in document["services"]}
        env = {digest_variable(s): d for s, d in secrets.items()}
        result[name] = Desired(name, directory, document, override, env, digests)
    return result


def _secret_digest(path: Path) -> str:
    try:
        return content_digest(path.read_bytes())
    except FileNotFoundError:  # --dry-run before the first render: it will be generated
        return "new"


def _service_digest(document: dict[str, Any], override: dict[str, Any], service: str, secrets: dict[str, str]) -> str:
    spec = document["services"][service]
    used = sorted({ref["source"] for ref in spec.get("secrets", [])})
    data = {
        "service": spec,
        "override": (override.get("services") or {}).get(service),
        "secrets": {s: secrets[s] for s in used},
        "networks": {n: document.get("networks", {}).get(n) for n in spec.get("networks", [])},
    }
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


# --- the convergence plan ------------------------------------------------------------------------


def converge(
    plan: Plan, wanted: dict[str, Desired], swarm: Swarm, *, include_removed_stacks: bool = True
) -> Convergence:
    """create / recreate (update) / leave / remove per service, from the digests on the running services."""
    running: dict[str, dict[str, Service]] = {}
    for found in swarm.services():
        if found.namespace.startswith(PROJECT_PREFIX):
            running.setdefault(found.namespace, {})[found.service] = found
    stacks = []
    for name, want in wanted.items():
        live = running.get(want.namespace, {})
        stack_plan = StackPlan(name, want.directory)
        for service, digest in want.digests.items():
            current = live.get(service)
            if current is None:
                stack_plan.actions.append(ServiceAction(name, service, "create", "new", cause="new"))
            elif current.spec_digest != digest:
                stack_plan.actions.append(ServiceAction(name, service, "recreate", "config changed", cause="config"))
            else:
                stack_plan.actions.append(ServiceAction(name, service, "leave", "running", cause="unchanged"))
        for service in sorted(set(live) - set(want.digests)):
            stack_plan.actions.append(
                ServiceAction(name, service, "remove", "no longer in the config", cause="removed")
            )
        stacks.append(stack_plan)
    if include_removed_stacks:
        wanted_namespaces = {project_name(n) for n in plan.stacks}
        for namespace in sorted(set(running) - wanted_namespaces):
            name = namespace.removeprefix(PROJECT_PREFIX)
            gone = StackPlan(name, Path(), remove_stack=True)
            gone.actions = [
                ServiceAction(name, s, "remove", "stack no longer in the config", cause="removed")
                for s in running[namespace]
            ]
            stacks.append(gone)
    return Convergence(stacks)


# --- applying ------------------------------------------------------------------------------------


def apply(
    convergence: Convergence,
    wanted: dict[str, Desired],
    plan: Plan,
    swarm: Swarm,
    docker: Engine,
    *,
    timeout: float,
    progress: Callable[[str], None] = lambda _msg: None,
    zfs: Zfs | None = None,
) -> ApplyResult:
    """Deploy what changed, stack by stack in order, and wait for each to converge; stop at the first
    stack that does not. Compose projects of homelab still running (a switch from engine: compose) are
    taken down first: the same datasets must not have two writers."""
    start = time.monotonic()
    result = ApplyResult([], [], 0.0)
    leave_compose(docker, progress)
    if convergence.stacks:
        (convergence.stacks[0].directory.parent / SWARM_MARK).write_text("homelab's stacks run on Swarm\n")
    for path in prepare_on_nodes(
        plan,
        [s.name for s in convergence.stacks if s.changed and not s.remove_stack],
        swarm,
        zfs_datasets=zfs_dataset_names(zfs or ZfsCli()),
        progress=progress,
        timeout=min(timeout, JOB_TIMEOUT),
    ):
        progress(f"created {path} on the node that mounts it")
    for stack in [s for s in convergence.stacks if s.changed]:
        if stack.remove_stack:
            progress(f"{stack.name}: taking down (no longer in the config)")
            remove_stack(swarm, project_name(stack.name), timeout)
            result.removed.append(stack.name)
            continue
        want = wanted[stack.name]
        names = [a.service for a in stack.actions if a.action in ("create", "recreate")]
        removed = [a.service for a in stack.actions if a.action == "remove"]
        progress(f"{stack.name}: deploying {', '.join(names) or 'removals'}, waiting up to {timeout:.0f}s")
        began = time.monotonic()
        swarm.remove_services([f"{want.namespace}_{s}" for s in removed])
        if names:
            _deploy(swarm, want, names)
            problems = wait_converged(swarm, want, names, began + timeout)
            if problems:
                raise ApplyFailed("\n".join(problems))
        prune_objects(swarm, want.namespace)
        progress(f"{stack.name}: converged after {time.monotonic() - began:.1f}s")
        result.applied.append(stack.name)
    result.seconds = time.monotonic() - start
    return result


def _deploy(swarm: Swarm, want: Desired, names: list[str]) -> None:
    """A stack file of just `names` (each stamped with its digest) and their part of the override."""
    services = {}
    for name in names:
        spec = json.loads(json.dumps(want.document["services"][name]))
        deploy = spec.setdefault("deploy", {})
        deploy["labels"] = {**deploy.get("labels", {}), SPEC_LABEL: want.digests[name]}
        # on the containers too: a task says which spec it runs (a task's spec is not comparable with
        # the service's, the engine fills defaults into one of them only)
        spec["labels"] = {**spec.get("labels", {}), SPEC_LABEL: want.digests[name]}
        services[name] = spec
    document: dict[str, Any] = {"services": services}
    for key, ref_key in (("secrets", "secrets"), ("configs", "configs")):
        used = {ref["source"] for s in services.values() for ref in s.get(ref_key, [])}
        if used:
            document[key] = {k: v for k, v in want.document[key].items() if k in used}
    if "networks" in want.document:
        document["networks"] = want.document["networks"]
    files = [want.directory / DEPLOY_FILE]
    override = {n: s for n, s in (want.override.get("services") or {}).items() if n in services}
    if override:
        files.append(want.directory / DEPLOY_OVERRIDE)
    try:
        files[0].write_text(dump(document), encoding="utf-8")
        if override:
            files[1].write_text(dump({"services": override}), encoding="utf-8")
        swarm.deploy(want.namespace, files, want.env)
    finally:
        for path in files:
            path.unlink(missing_ok=True)


def wait_converged(swarm: Swarm, want: Desired, names: list[str], deadline: float) -> list[str]:
    """Problems left when every named service runs its new spec on all replicas (empty), or when one
    cannot (rolled back, paused), or at the deadline (why each is not there yet)."""
    while True:
        services = {s.service: s for s in swarm.services([want.namespace]) if s.service in names}
        tasks = swarm.tasks([s.id for s in services.values()])
        verdicts = {name: _verdict(want, name, services.get(name), tasks) for name in names}
        failed = [v for v in verdicts.values() if v and v.startswith("failed")]
        waiting = [v for v in verdicts.values() if v]
        if failed:
            return [f"stack {want.stack}: {v}" for v in failed]
        if not waiting:
            return []
        if time.monotonic() >= deadline:
            return [f"stack {want.stack}: {v}" for v in waiting]
        time.sleep(POLL_SECONDS)


def _verdict(want: Desired, name: str, service: Service | None, tasks: list[Task]) -> str:
    """ "" when converged; "failed: ..." when it will not get there; else what it is waiting for."""
    if service is None:
        return f"{name}: not created"
    if service.spec_digest != want.digests[name]:
        if service.update_state == "rollback_completed":
            return f"failed: {name}: the update failed and Swarm rolled it back ({service.update_message})"
        return f"{name}: rolling back ({service.update_message})"
    if service.update_state in FAILED_UPDATE:
        return f"failed: {name}: update {service.update_state} ({service.update_message})"
    mine = [t for t in tasks if t.service_id == service.id]
    running = [t for t in mine if t.desired == "running"]
    current = [t for t in running if t.state == "running" and t.spec_digest == want.digests[name]]
    if len(current) >= service.replicas and len(running) == len(current):
        return ""
    return f"{name}: {task_reason(mine)[0]}"


TRANSITIONAL = ("new", "allocated", "pending", "assigned", "accepted", "preparing", "ready", "starting")


def task_reason(tasks: list[Task], nodes: dict[str, Node] | None = None) -> tuple[str, bool]:
    """Why the service does not run, from its latest task of any desired state (a rejected task is
    shut down at once: the running ones say nothing), with the node it was on when that node is not
    ready; and whether it may still get there (a task being started, with no error)."""
    if not tasks:
        return "no task (Swarm made none)", False
    latest = max(tasks, key=lambda t: t.updated_at)
    words = latest.error or latest.message
    reason = f"{latest.state}: {words}" if words else latest.state
    down = {t.node_id for t in tasks if t.node_id in (nodes or {}) and (nodes or {})[t.node_id].state != "ready"}
    for node_id in sorted(down):
        node = (nodes or {})[node_id]
        reason += f"; node {node.hostname} is {node.state}"
    return reason, latest.state in TRANSITIONAL and not latest.error and not down


def prune_objects(swarm: Swarm, namespace: str) -> None:
    """Secrets and configs of earlier versions (their names carry the old content's digest), except those
    the services' previous specs name (Swarm rolls back to them)."""
    services = swarm.services([namespace])
    for kind in ("secret", "config"):
        used = {name for s in services for name in (s.secrets if kind == "secret" else s.configs)}
        swarm.remove_objects(kind, [n for n in swarm.objects(kind, namespace) if n not in used])


# --- leaving and down ------------------------------------------------------------------------------


def remove_stack(swarm: Swarm, namespace: str, timeout: float = 120) -> None:
    """`stack rm`, then wait until its services, tasks and networks are gone (Swarm stops the tasks after
    `stack rm` returns): a compose project or a new deploy must not meet a half-removed network. A network
    a stopping task still used is refused: `stack rm` again until the engine takes it."""
    problem = swarm.remove_stack(namespace)
    deadline = time.monotonic() + timeout
    while left := swarm.leftovers(namespace):
        if time.monotonic() >= deadline:
            raise ApplyFailed(f"stack {namespace} still there after {timeout:.0f}s ({problem or ', '.join(left)})")
        time.sleep(POLL_SECONDS)
        if problem:
            problem = swarm.remove_stack(namespace)


def leave_compose(docker: Engine, progress: Callable[[str], None]) -> None:
    """Take down homelab's compose projects (engine was compose); data, acme.json and secrets stay."""
    for project in sorted({c.project for c in docker.containers()}):
        progress(f"{project}: compose project taken down (engine is swarm now; data kept)")
        docker.down(project, None)


def leave_swarm(swarm: Swarm, out: Path, stacks: Iterable[str] | None, progress: Callable[[str], None]) -> list[str]:
    """Remove homelab's swarm stacks (`down`; all of them when `stacks` is None: the engine is compose
    now), last stack first; datasets, acme.json and secrets stay."""
    try:
        running = sorted({s.namespace for s in swarm.services() if s.namespace.startswith(PROJECT_PREFIX)})
    except CommandFailed:  # not a swarm manager: nothing of ours runs on Swarm here
        running = []
    # the edge first, so it goes last: the other stacks' services sit on its proxy network
    names = sorted((n.removeprefix(PROJECT_PREFIX) for n in running), key=lambda n: n != EDGE_STACK)
    names = names if stacks is None else list(stacks)
    if not set(running) - {project_name(n) for n in names}:
        (out / SWARM_MARK).unlink(missing_ok=True)
    done = []
    for name in reversed(names):
        if project_name(name) in running:
            progress(f"{name}: removing the swarm stack (data kept)")
            remove_stack(swarm, project_name(name))
            done.append(name)
    return done
