"""Every verb of the `Engine` interface (homelab/engine/interface.py), the same test against both engines:
Compose on the recording Docker fake, Swarm on the recording swarm fake (tests/fakes/)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from homelab.config.loader import load
from homelab.engine.compose_engine import ComposeEngine
from homelab.engine.interface import Engine, engine_for
from homelab.engine.model import Convergence
from homelab.engine.swarm import SWARM_MARK
from homelab.engine.swarm_engine import SwarmEngine
from homelab.errors import EnvironmentProblem
from homelab.plan_model import Plan
from homelab.project import render_project
from tests.fakes.docker import FakeDocker
from tests.fakes.swarm import FakeSwarm
from tests.fakes.zfs import FakeZfs
from tests.unit.conftest import Deployment

STACKS = ["edge", "dev"]


@dataclass
class Rig:
    kind: str
    engine: Engine
    docker: FakeDocker
    swarm: FakeSwarm
    config: Path
    out: Path

    def render(self) -> tuple[Plan, dict[str, bytes], list[str]]:
        result = render_project(load(self.config), self.out)
        changed = [c.path for c in result.report.changes if c.status in ("new", "changed")]
        return result.plan, result.rendering.files, changed

    def converge(self, stacks: list[str] = STACKS) -> tuple[Plan, Convergence]:
        plan, files, changed = self.render()
        convergence = self.engine.converge(
            plan, self.out, files, stacks, changed=changed, dry_run=False, include_removed_stacks=False
        )
        return plan, convergence

    def up(self) -> Plan:
        plan, convergence = self.converge()
        self.engine.apply(convergence, plan, timeout=5, progress=lambda _m: None, guard=_no_guard)
        return plan

    def unreachable(self) -> None:
        if self.kind == "compose":
            self.docker.version = None
        else:
            self.swarm.local_state = "inactive"

    def break_gitea(self) -> None:
        if self.kind == "compose":
            self.docker.running = [
                replace(c, state="exited", exit_code=2) if c.service == "gitea" else c for c in self.docker.running
            ]
        else:
            self.swarm.fail("gitea", "failed", "task: non-zero exit (2)")


def _no_guard(_stack: object):  # type: ignore[no-untyped-def]
    from contextlib import nullcontext

    return nullcontext()


@pytest.fixture(params=["compose", "swarm"])
def rig(request: pytest.FixtureRequest, deployment: Deployment, monkeypatch: pytest.MonkeyPatch) -> Rig:
    monkeypatch.setattr("homelab.engine.compose.ZfsCli", FakeZfs)
    monkeypatch.setattr("homelab.engine.swarm.ZfsCli", FakeZfs)
    monkeypatch.setattr("homelab.engine.swarm.POLL_SECONDS", 0)
    docker, swarm = FakeDocker(), FakeSwarm()
    if request.param == "swarm":
        text = deployment.config.read_text().replace("version: 1\n", "version: 1\nengine: swarm\n", 1)
        deployment.config.write_text(text)
        engine: Engine = SwarmEngine(swarm, docker)
    else:
        engine = ComposeEngine(docker, swarm)
    return Rig(request.param, engine, docker, swarm, deployment.config, deployment.out)


def test_engine_for_reads_the_config(rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("homelab.runtime.docker.Docker", lambda: rig.docker)
    monkeypatch.setattr("homelab.runtime.swarm.SwarmCli", lambda: rig.swarm)
    assert type(engine_for(load(rig.config).config)) is type(rig.engine)


def test_check_passes_then_refuses_an_engine_that_cannot_run_the_stacks(rig: Rig) -> None:
    rig.engine.check()
    rig.unreachable()
    with pytest.raises(EnvironmentProblem):
        rig.engine.check()


def test_converge_creates_then_apply_then_nothing_to_change(rig: Rig) -> None:
    _, first = rig.converge()
    assert {a.action for a in first.actions()} == {"create"}
    assert [s.name for s in first.stacks] == STACKS
    rig.up()
    _, again = rig.converge()
    assert {a.action for a in again.actions()} == {"leave"} and not again.changed


def test_apply_reports_the_stacks_it_applied(rig: Rig) -> None:
    plan, convergence = rig.converge()
    said: list[str] = []
    result = rig.engine.apply(convergence, plan, timeout=5, progress=said.append, guard=_no_guard)
    assert result.applied == STACKS and result.removed == []
    assert said and all(line.split(":")[0] in STACKS or line.startswith("node ") for line in said), said


def test_declared_down_names_what_is_down_with_the_engines_reason(rig: Rig) -> None:
    plan = rig.up()
    assert rig.engine.declared_down(plan, STACKS) == []
    rig.break_gitea()
    (down,) = rig.engine.declared_down(plan, STACKS)
    assert (down.stack, down.service) == ("dev", "gitea") and not down.starting
    assert down.reason == {"compose": "exited (exit code 2)", "swarm": "failed: task: non-zero exit (2)"}[rig.kind]


def test_status_has_one_row_per_declared_service_with_the_same_reason(rig: Rig) -> None:
    plan = rig.up()
    rig.break_gitea()
    rows = {f"{r.stack}/{r.service}": r for r in rig.engine.status(plan)}
    assert set(rows) == {f"{s.name}/{n}" for s in plan.stacks.values() for n in s.services}
    assert rows["dev/gitea"].reason == rig.engine.declared_down(plan, STACKS)[0].reason
    assert rows["edge/traefik"].state == "running" and rows["edge/traefik"].reason == ""
    assert rows["media/plex"].reason  # never brought up


def test_no_drift_after_up(rig: Rig) -> None:
    plan = rig.up()
    _, convergence = rig.converge()
    assert rig.engine.drift(convergence, plan, []) == []
    assert rig.engine.status_drift(plan, rig.out) == []


def test_logs_name_the_service(rig: Rig) -> None:
    rig.up()
    argv = rig.engine.logs_argv("dev", "gitea", rig.out, follow=True, tail="10")
    assert argv[-1] in ("gitea", "homelab-dev_gitea") and "-f" in argv and "10" in argv


def test_down_takes_the_stacks_down_last_first(rig: Rig) -> None:
    plan = rig.up()
    assert rig.engine.down(plan, rig.out, STACKS, lambda _m: None) == ["dev", "edge"]
    assert rig.engine.down(plan, rig.out, STACKS, lambda _m: None) == []


def test_doctor_checks_of_the_engine(rig: Rig) -> None:
    plan, _ = rig.converge()
    names = [c.name for c in rig.engine.checks(plan)]
    assert names == ([] if rig.kind == "compose" else ["swarm", "label homelab.storage", "label homelab.edge",
                                                       "docker_gwbridge", "overlay ports"])  # fmt: skip


def test_begin_takes_down_what_the_other_engine_runs(rig: Rig) -> None:
    rig.up()
    rig.out.joinpath(SWARM_MARK).write_text("homelab's stacks run on Swarm\n")
    rig.engine.begin(rig.out, dry_run=False, progress=lambda _m: None)
    removed = [c[1] for c in rig.swarm.calls if c[0] == "remove_stack"]
    # compose: the swarm stacks go (none run on the fake swarm here: nothing to remove, the mark goes);
    # swarm: compose projects are taken down by apply, not before the render
    assert removed == [] and (rig.out / SWARM_MARK).exists() == (rig.kind == "swarm")


def test_the_compose_driver_is_there_only_for_compose(rig: Rig) -> None:
    assert (rig.engine.compose_driver() is rig.docker) == (rig.kind == "compose")
    assert (rig.engine.compose_driver() is None) == (rig.kind == "swarm")


def test_the_edge_log_is_read_while_the_edge_runs_wherever_it_runs(rig: Rig) -> None:
    """`certs`' last error and the challenge records `up` keeps come from it: on Swarm through the manager
    (`service logs`), the edge's task being on another node; nothing once the edge stopped."""
    plan = rig.up()
    line = "level=error msg=\"Unable to obtain ACME certificate\" domains=[\"git.example.com\"]\n"
    if rig.kind == "compose":
        (edge,) = [c for c in rig.docker.running if c.service == "traefik"]
        rig.docker.logs[edge.id] = line
    else:
        rig.swarm.service_logs["homelab-edge_traefik"] = [line]
    assert rig.engine.edge_log(plan) == line
    if rig.kind == "compose":
        rig.docker.running = [replace(c, state="exited") if c.service == "traefik" else c for c in rig.docker.running]
    else:
        rig.swarm.fail("traefik", "failed", "task: non-zero exit (1)")
    assert rig.engine.edge_log(plan) == ""
