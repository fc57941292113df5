"""The health gate of `homelab up`: is every service of a stack running and healthy, and if not, why.

compose's exit code is not trusted: 2.40 can return 0 from `up --wait` while a dependency is unhealthy
and its dependents sit in "created", and it has returned 0 having created nothing. So every planned
service is checked on the engine, and a failure names the service and what it last said.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from homelab.errors import CommandFailed, HomelabError
from homelab.runtime.docker import Container, Engine, describe_failure

if TYPE_CHECKING:
    from homelab.apply import StackPlan

POLL_SECONDS = 1.0  # between two looks at a stack whose services are still starting
LOG_LINES = 3  # of a stopped container's output, in the failure message


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
        return f"stack {stack}: service {c.service} {verdict}; last health check: {c.health_output or '(no output)'}"
    text = docker.logs_tail(c.id, LOG_LINES)
    tail = " | ".join(line.strip() for line in text.splitlines()[-LOG_LINES:])
    return f"stack {stack}: service {c.service} {c.state} (exit code {c.exit_code})" + (
        f"; last output: {tail}" if tail else ""
    )
