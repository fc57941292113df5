"""Drift: containers of our compose projects that differ from the plan (changed by hand with docker).

A container differs when compose's config-hash label is not what `docker compose config --hash` gives
for the stack's compose.yaml on disk (this covers image, labels, environment, mounts, networks and
ports: compose hashes the whole service), or when the container's image or an environment variable
the plan sets is not the plan's (a container recreated by hand with the labels copied keeps the old
hash). A stray is a container of one of our projects whose service the config does not have.
`status` lists them; `up` recreates or removes them (apply's convergence plan) and says so.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from homelab.engine.compose import converge
from homelab.engine.model import Convergence, ServiceAction
from homelab.layout import COMPOSE_FILE
from homelab.plan_model import Plan, Service
from homelab.runtime.docker import Container, Engine

REPAIR = "drift"  # the reason of a recreate this module added: a return to the plan, not an upgrade


@dataclass(frozen=True)
class Drift:
    stack: str
    service: str
    container: str  # its name
    kind: Literal["changed", "stray"]
    differences: tuple[str, ...]  # what differs; names only (an environment value may be a secret)


def differences(service: Service, container: Container) -> list[str]:
    """What of the plan's service this container does not have (image, environment variables)."""
    found = []
    if container.image != service.image:
        found.append(f"image {container.image} (plan: {service.image})")
    env = dict(item.partition("=")[::2] for item in container.env)
    found += [f"environment {key}" for key, value in sorted(service.environment.items()) if env.get(key) != value]
    return found


def find_drift(convergence: Convergence, plan: Plan, changed_files: list[str] | tuple[str, ...] = ()) -> list[Drift]:
    """Drift among the convergence's containers. Stacks whose compose.yaml this render changed are
    planned changes, not drift."""
    rendered = {path.split("/")[0] for path in changed_files if path.endswith(f"/{COMPOSE_FILE}")}
    result = []
    for stack_plan in convergence.stacks:
        if stack_plan.name in rendered or stack_plan.remove_stack:
            continue
        for action in stack_plan.actions:
            drift = _drift_of(plan, action)
            if drift is not None:
                result.append(drift)
    return result


def _drift_of(plan: Plan, action: ServiceAction) -> Drift | None:
    container = action.container
    if container is None:
        return None
    if action.action == "remove":
        return Drift(action.stack, action.service, container.name, "stray", ("not in the config",))
    found = differences(plan.stacks[action.stack].services[action.service], container)
    if action.cause == "config":
        found.insert(0, "compose config hash")
    return Drift(action.stack, action.service, container.name, "changed", tuple(found)) if found else None


def status_drift(plan: Plan, out: Path, docker: Engine) -> list[Drift]:
    """Drift against the stacks folder as last rendered (what `up` would converge to without a change)."""
    return find_drift(converge(plan, out, docker, list(plan.stacks)), plan)


def mark_repairs(convergence: Convergence, drifts: list[Drift]) -> list[Drift]:
    """Make `up` recreate every drifted service it would otherwise leave (compose's hash may match);
    returns `drifts`, what `up` will report as repaired."""
    changed = {(d.stack, d.service) for d in drifts if d.kind == "changed"}
    for stack_plan in convergence.stacks:
        for index, action in enumerate(stack_plan.actions):
            if (action.stack, action.service) in changed and action.action in ("leave", "start"):
                stack_plan.actions[index] = replace(action, action="recreate", cause="inputs", reason=REPAIR)
    return drifts


def describe(found: Drift) -> str:
    what = "stray container" if found.kind == "stray" else "changed by hand"
    return f"drift: {found.stack}/{found.service} ({found.container}) {what}: {', '.join(found.differences)}"
