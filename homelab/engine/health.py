"""The health gate of `homelab up`: is every service of a stack running and healthy, and if not, why.

compose's exit code is not trusted: 2.40 can return 0 from `up --wait` while a dependency is unhealthy
and its dependents sit in "created", and it has returned 0 having created nothing. So every planned
service is checked on the engine, and a failure names the service and what it last said.

The last word of `up` (and `status`) is about the declared state, not about what this run deployed:
every service of the selected stacks must run and be healthy (or run, without a health check), each
one that is not is named with the engine's reason (`Down`): exit code, OOM kill, last health probe,
a bind source that no longer exists.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from homelab.engine.model import Down, StackPlan
from homelab.errors import CommandFailed, HomelabError
from homelab.layout import EDGE_STACK, project_name
from homelab.runtime.docker import Container, Engine, describe_failure

if TYPE_CHECKING:
    from homelab.plan_model import Plan


POLL_SECONDS = 1.0  # between two looks at a stack whose services are still starting
LOG_LINES = 3  # of a stopped container's output, in the failure message
_OOM_NOTE = "; it was OOM-killed at its memory limit"  # restarted by its policy, the kill stays on record


class ApplyFailed(HomelabError):
    """A stack did not come up (a service never turned healthy, exited, or compose failed)."""

    exit_code = 1


def wait_healthy(docker: Engine, stack: StackPlan, deadline: float) -> list[str]:
    """Services of the stack not running+healthy (or with no container at all); waits while some are
    still starting, until `deadline` (time.monotonic)."""
    while True:
        containers = docker.containers([stack.project])
        starting = [c.service for c in containers if c.running and c.health == "starting"]
        bad = [c.service for c in containers if not c.running or c.health == "unhealthy"]
        bad += missing(stack, containers)
        if bad or not starting or time.monotonic() >= deadline:
            return sorted(bad + starting)
        time.sleep(POLL_SECONDS)


def missing(stack: StackPlan, containers: list[Container]) -> list[str]:
    """Planned services that have no container."""
    present = {c.service for c in containers}
    return sorted({a.service for a in stack.actions if a.action != "remove"} - present)


def diagnose(docker: Engine, stack: StackPlan, exc: Exception, seconds: float, later: list[str]) -> ApplyFailed:
    """Turn a failed `up --wait` into: which service, what its last health check said, what waits."""
    containers = docker.containers([stack.project])
    bad = [
        c for c in containers if c.health in ("unhealthy", "starting") or c.state in ("exited", "dead", "restarting")
    ]
    not_started = sorted(c.service for c in containers if c.state == "created")
    lines = [
        f"stack {stack.name}: service {name} has no container (compose created none)"
        for name in missing(stack, containers)
    ]
    lines += [_verdict(docker, stack.name, c, seconds) for c in sorted(bad, key=_worst_first)]
    reason = describe_failure(exc) if isinstance(exc, CommandFailed) else str(exc)
    if not lines:
        lines.append(f"stack {stack.name}: docker compose up failed: {reason}")
    elif isinstance(exc, CommandFailed) and not bad:
        # compose failed before starting them (a network, a volume, a name): its own words say why
        lines.append(f"  docker compose up said: {reason}")
    if not_started:
        lines.append(f"  not started (waiting on it): {', '.join(not_started)}")
    if later:
        lines.append(f"  stacks not applied: {', '.join(later)}")
    return ApplyFailed("\n".join(lines))


def _worst_first(container: Container) -> tuple[bool, str]:
    return container.health != "unhealthy", container.service


def _verdict(docker: Engine, stack: str, c: Container, seconds: float) -> str:
    if c.health in ("unhealthy", "starting"):
        verdict = "is unhealthy" if c.health == "unhealthy" else f"did not become healthy within {seconds:.0f}s"
        probe = f"last health check: {c.health_output or '(no output)'}{_OOM_NOTE if c.oom_killed else ''}"
        return f"stack {stack}: service {c.service} {verdict}; {probe}"
    return f"stack {stack}: service {c.service} {container_reason(docker, c)}"


# --- the declared state --------------------------------------------------------------------------


def gated_stacks(plan: Plan, selected: list[str]) -> list[str]:
    """The stacks whose health `up` answers for: the selected ones, and the edge when one of them is
    served through it (its routes do not work while the edge is down)."""
    routed = {r.stack for r in plan.routes} | {r.stack for r in plan.tcp_routes}
    edge = [EDGE_STACK] if EDGE_STACK in plan.stacks and EDGE_STACK not in selected and routed & set(selected) else []
    return [n for n in plan.stacks if n in selected or n in edge]


def require_declared(look: Callable[[], list[Down]], timeout: float) -> None:
    """`up`'s last word: ApplyFailed naming every declared service still down once none is starting
    any more (or at the timeout); `look` asks the engine."""
    deadline = time.monotonic() + timeout
    down = look()
    while any(d.starting for d in down) and time.monotonic() < deadline:
        time.sleep(POLL_SECONDS)
        down = look()
    if down:
        lines = [f"up: {len(down)} declared service(s) not running and healthy:", *(f"  {d}" for d in down)]
        raise ApplyFailed("\n".join(lines))


def compose_down(plan: Plan, docker: Engine, stacks: list[str]) -> list[Down]:
    """Every declared service of `stacks` that is not running and healthy on the engine, and why."""
    containers = {(c.project, c.service): c for c in docker.containers([project_name(n) for n in stacks])}
    result = []
    for name in stacks:
        for service in plan.stacks[name].services:
            found = containers.get((project_name(name), service))
            reason = container_reason(docker, found)
            if reason:
                starting = found is not None and found.running and found.health == "starting"
                result.append(Down(name, service, reason, starting))
    return result


def container_reason(docker: Engine, c: Container | None) -> str:
    """Why this container is not running and healthy ("" when it is): the engine's own words."""
    if c is None:
        return "no container"
    oom = ", OOM-killed at its memory limit" if c.oom_killed else ""
    if not c.running:
        text = docker.logs_tail(c.id, LOG_LINES) if c.state in ("exited", "dead", "restarting") else ""
        tail = " | ".join(line.strip() for line in text.splitlines()[-LOG_LINES:])
        return f"{c.state} (exit code {c.exit_code}{oom})" + (f"; last output: {tail}" if tail else "")
    if c.health in ("unhealthy", "starting"):
        verdict = "unhealthy" if c.health == "unhealthy" else "not healthy yet"
        return f"{verdict}; last health check: {c.health_output or '(no output)'}{_OOM_NOTE if c.oom_killed else ''}"
    gone = [m.get("Source", "") for m in c.mounts if m.get("Type") == "bind" and _missing(m.get("Source", ""))]
    if gone:
        return f"running, but its bind source path does not exist: {', '.join(gone)}"
    return ""


def _missing(path: str) -> bool:
    """The host path is not there (the engine runs on this host: compose's bind sources are ours)."""
    try:
        Path(path).stat()
    except FileNotFoundError:
        return True
    except OSError:  # not ours to read: it is there
        return False
    return False
