"""The records every engine speaks: what `up` will do to each service (the convergence plan), what it did,
and a declared service that is down with the engine's reason. They import nothing of the engines, so
the engines, the upgrade guard and the `up` session share them without a circle."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from homelab.errors import ConfigError
from homelab.layout import project_name
from homelab.plan_model import Plan
from homelab.runtime.docker import Container

Action = Literal["create", "recreate", "start", "leave", "remove"]
# Why: what decisions depend on (`reason` is the same for people, and may carry details).
Cause = Literal["new", "config", "inputs", "image", "stopped", "unchanged", "removed"]


Progress = Callable[[str], None]
# wraps each stack's step of `up` (homelab/upgrade/run.py: snapshot before, roll back on failure)
Guard = Callable[["StackPlan"], AbstractContextManager[None]]


@dataclass(frozen=True)
class ServiceAction:
    stack: str
    service: str
    action: Action
    reason: str = ""
    container: Container | None = None
    cause: Cause = "unchanged"


@dataclass
class StackPlan:
    name: str
    directory: Path
    actions: list[ServiceAction] = field(default_factory=list)
    remove_stack: bool = False  # a homelab stack still running that the config no longer has

    @property
    def project(self) -> str:
        return project_name(self.name)

    @property
    def changed(self) -> bool:
        return self.remove_stack or any(a.action != "leave" for a in self.actions)

    @property
    def forced(self) -> list[str]:
        """Services compose would leave alone (same hash) but that must be recreated."""
        return [
            a.service
            for a in self.actions
            if a.action == "recreate" and a.container is not None and a.container.config_hash and a.cause != "config"
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


@dataclass(frozen=True)
class Down:
    """A declared service that is not running and healthy, with the engine's own reason."""

    stack: str
    service: str
    reason: str
    starting: bool = False  # it may still get there (a health check not passed yet, a task being started)

    def __str__(self) -> str:
        return f"{self.stack}/{self.service}: {self.reason}"
