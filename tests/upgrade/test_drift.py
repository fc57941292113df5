"""Drift on the recording fakes: containers changed by hand are found, named, and recreated by `up`."""

from __future__ import annotations

from homelab.engine import compose as apply
from homelab.engine import drift
from homelab.layout import project_name
from tests.fakes.docker import FakeDocker, container
from tests.fakes.zfs import FakeZfs
from tests.unit.conftest import Deployment

DEV = project_name("dev")


def _as_planned(deployment: Deployment, service: str, **fields: object):  # type: ignore[no-untyped-def]
    planned = deployment.plan.stacks["dev"].services[service]
    env = (*tuple(f"{k}={v}" for k, v in planned.environment.items()), "PATH=/usr/bin")
    return container(DEV, service, **{"image": planned.image, "env": env, **fields})


def _docker(deployment: Deployment, *extra) -> FakeDocker:  # type: ignore[no-untyped-def]
    docker = FakeDocker(*[_as_planned(deployment, s) for s in ("gitea", "jenkins", "rstudio")], *extra)
    docker.hashes[DEV] = {s: f"hash-{s}" for s in ("gitea", "jenkins", "rstudio")}
    return docker


def _found(deployment: Deployment, docker: FakeDocker) -> list[drift.Drift]:
    convergence = apply.converge(deployment.plan, deployment.out, docker, ["dev"], include_removed_stacks=False)
    return drift.find_drift(convergence, deployment.plan)


def test_containers_as_planned_have_no_drift(deployment: Deployment) -> None:
    assert _found(deployment, _docker(deployment)) == []


def test_a_container_recreated_by_hand_with_another_env_var_is_found_and_repaired(deployment: Deployment) -> None:
    docker = _docker(deployment)
    gitea = deployment.plan.stacks["dev"].services["gitea"]
    key = sorted(gitea.environment)[0]
    hand = tuple(f"{k}={'HANDSET-VALUE' if k == key else v}" for k, v in gitea.environment.items())
    docker.running[0] = _as_planned(deployment, "gitea", env=hand)  # labels copied: same config hash
    convergence = apply.converge(deployment.plan, deployment.out, docker, ["dev"], include_removed_stacks=False)
    found = drift.find_drift(convergence, deployment.plan)
    assert found == [drift.Drift("dev", "gitea", "homelab-dev-gitea-1", "changed", (f"environment {key}",))]
    assert "HANDSET-VALUE" not in repr(found)  # values are never shown
    drift.mark_repairs(convergence, found)
    assert convergence.stacks[0].forced == ["gitea"]
    apply.apply(convergence, deployment.plan, docker, timeout=30, zfs=FakeZfs())
    assert ("up", DEV, "gitea") in docker.calls


def test_another_hash_image_and_a_stray_are_reported(deployment: Deployment) -> None:
    docker = _docker(deployment, container(DEV, "adminer"))
    docker.running[1] = _as_planned(deployment, "jenkins", config_hash="edited", image="jenkins/jenkins:hand")
    found = {d.service: d for d in _found(deployment, docker)}
    assert set(found) == {"jenkins", "adminer"}
    assert found["jenkins"].differences[0] == "compose config hash"
    assert found["jenkins"].differences[1].startswith("image jenkins/jenkins:hand (plan: ")
    assert found["adminer"].kind == "stray"


def test_a_stack_this_render_changed_is_a_plan_not_drift(deployment: Deployment) -> None:
    docker = _docker(deployment)
    docker.running[1] = _as_planned(deployment, "jenkins", config_hash="old")
    convergence = apply.converge(deployment.plan, deployment.out, docker, ["dev"], include_removed_stacks=False)
    assert drift.find_drift(convergence, deployment.plan, ["dev/compose.yaml"]) == []
    assert [d.service for d in drift.find_drift(convergence, deployment.plan)] == ["jenkins"]


def test_a_repaired_image_is_not_taken_for_an_upgrade(deployment: Deployment) -> None:
    from homelab.upgrade import run as upgrade

    docker = _docker(deployment)
    docker.running[0] = _as_planned(deployment, "gitea", image="gitea/gitea:by-hand")
    convergence = apply.converge(deployment.plan, deployment.out, docker, ["dev"], include_removed_stacks=False)
    found = drift.find_drift(convergence, deployment.plan)
    drift.mark_repairs(convergence, found)
    assert [d.service for d in found] == ["gitea"] and upgrade.find_upgrades(convergence, deployment.plan) == []
