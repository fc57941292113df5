"""Plan, then apply, against the recording Docker and ZFS fakes: what `up` decides for each service, and
what it hands to compose, in which order, and what it says when a stack does not come up."""

from __future__ import annotations

import os
import stat

import pytest

from homelab.engine import compose as apply
from homelab.engine.health import ApplyFailed
from homelab.engine.model import select_stacks
from homelab.errors import CommandFailed, ConfigError
from tests.fakes.docker import FakeDocker, container
from tests.fakes.zfs import FakeZfs
from tests.unit.conftest import Deployment

DEV = "homelab-dev"


def _dev_running(**overrides: dict[str, object]) -> list:
    return [container(DEV, s, **overrides.get(s, {})) for s in ("gitea", "jenkins", "rstudio")]


def _current(docker: FakeDocker) -> None:
    """Every running container's hash is what compose would stamp now."""
    for c in docker.running:
        docker.hashes.setdefault(c.project, {})[c.service] = c.config_hash or ""


def _by_service(convergence: apply.Convergence) -> dict[str, tuple[str, str]]:
    return {f"{a.stack}/{a.service}": (a.action, a.reason) for a in convergence.actions()}


def test_select_stacks_keeps_dependency_order_and_refuses_unknown_names(deployment: Deployment) -> None:
    plan = deployment.plan
    assert select_stacks(plan, []) == ["edge", "media", "cloud", "dev", "monitoring"]
    assert select_stacks(plan, ["dev", "edge"]) == ["edge", "dev"]
    with pytest.raises(ConfigError) as caught:
        select_stacks(plan, ["dev", "mail"])
    assert caught.value.problems == ["unknown stack 'mail' (this config has: edge, media, cloud, dev, monitoring)"]


def test_nothing_running_creates_everything_without_asking_compose_for_hashes(deployment: Deployment) -> None:
    docker = FakeDocker()
    convergence = apply.converge(deployment.plan, deployment.out, docker, ["edge", "dev"])
    assert _by_service(convergence) == {
        "edge/traefik": ("create", "new"),
        "edge/socket-proxy": ("create", "new"),
        "edge/ddclient": ("create", "new"),
        "dev/gitea": ("create", "new"),
        "dev/jenkins": ("create", "new"),
        "dev/rstudio": ("create", "new"),
    }
    assert convergence.changed
    assert not [c for c in docker.calls if c[0] in ("config_hashes", "image_ids")]


def test_each_reason_to_act_on_a_running_service(deployment: Deployment) -> None:
    docker = FakeDocker(
        *_dev_running(rstudio={"state": "exited", "health": None}),
        container("homelab-media", "plex", image="plexinc/pms-docker:1.41.3.9314-a0bfb8370", image_id="sha256:old"),
        container("homelab-media", "tautulli"),  # a service the config no longer has
        container("homelab-mail", "postfix"),  # a stack the config no longer has
    )
    _current(docker)
    docker.hashes[DEV]["gitea"] = "hash-gitea-v2"
    docker.local_images["plexinc/pms-docker:1.41.3.9314-a0bfb8370"] = "sha256:new"
    changed = ["dev/../secrets/none", "secrets/rstudio_password", "secrets/gitea_secret_key"]
    convergence = apply.converge(deployment.plan, deployment.out, docker, ["media", "dev"], changed_files=changed)
    actions = _by_service(convergence)
    assert actions["dev/gitea"] == ("recreate", "config changed")
    assert actions["dev/jenkins"] == ("leave", "healthy")
    assert actions["dev/rstudio"] == ("recreate", "secrets/rstudio_password changed")
    assert actions["media/plex"] == ("recreate", "image plexinc/pms-docker:1.41.3.9314-a0bfb8370 updated")
    assert actions["media/tautulli"] == ("remove", "no longer in the config")
    assert actions["mail/postfix"] == ("remove", "stack no longer in the config")
    stacks = {s.name: s for s in convergence.stacks}
    assert stacks["mail"].remove_stack and stacks["mail"].changed
    # compose's own hash already differs for gitea: only the others must be forced
    assert stacks["dev"].forced == ["rstudio"] and stacks["media"].forced == ["plex"]


def test_a_stopped_service_is_started_and_a_current_one_left(deployment: Deployment) -> None:
    docker = FakeDocker(*_dev_running(jenkins={"state": "exited", "health": None}, rstudio={"health": None}))
    _current(docker)
    convergence = apply.converge(deployment.plan, deployment.out, docker, ["dev"], include_removed_stacks=False)
    assert _by_service(convergence) == {
        "dev/gitea": ("leave", "healthy"),
        "dev/jenkins": ("start", "exited"),
        "dev/rstudio": ("leave", "running"),
    }
    assert convergence.stacks[0].forced == []
    assert [a.service for a in convergence.actions("start")] == ["jenkins"]


def test_rendered_files_a_service_mounts_recreate_it(deployment: Deployment) -> None:
    docker = FakeDocker(*[container("homelab-edge", s) for s in ("traefik", "socket-proxy", "ddclient")])
    _current(docker)
    changed = ["edge/traefik/dynamic.yml", "edge/traefik/traefik.yml", "media/compose.yaml"]
    convergence = apply.converge(deployment.plan, deployment.out, docker, ["edge"], changed_files=changed)
    assert _by_service(convergence) == {
        "edge/traefik": ("recreate", "edge/traefik/traefik.yml changed (+1)"),  # in mount order
        "edge/socket-proxy": ("leave", "healthy"),
        "edge/ddclient": ("leave", "healthy"),
    }


def test_compose_hashes_are_cached_by_the_files_compose_reads(deployment: Deployment) -> None:
    docker = FakeDocker(*_dev_running())
    _current(docker)
    apply.converge(deployment.plan, deployment.out, docker, ["dev"])
    apply.converge(deployment.plan, deployment.out, docker, ["dev"])
    assert [c for c in docker.calls if c[0] == "config_hashes"] == [("config_hashes", DEV)]
    (deployment.out / "dev" / ".env").write_text("TZ=UTC\n")  # compose reads it: the cache must not answer
    apply.converge(deployment.plan, deployment.out, docker, ["dev"])
    assert len([c for c in docker.calls if c[0] == "config_hashes"]) == 2


def test_dry_run_hashes_pending_compose_bytes_and_caches_nothing(deployment: Deployment) -> None:
    docker = FakeDocker(*_dev_running())
    _current(docker)
    pending = {"dev": b"services: {}\n"}
    apply.converge(deployment.plan, deployment.out, docker, ["dev"], pending_compose=pending)
    assert not (deployment.out / apply.HASH_CACHE).exists()


def test_apply_brings_changed_stacks_up_in_order_and_prepares_the_host(deployment: Deployment) -> None:
    docker = FakeDocker(container("homelab-mail", "postfix"))
    convergence = apply.converge(deployment.plan, deployment.out, docker, ["edge", "dev"])
    said: list[str] = []
    result = apply.apply(convergence, deployment.plan, docker, timeout=30, progress=said.append, zfs=FakeZfs())
    assert result.applied == ["edge", "dev"] and result.removed == ["mail"]
    assert docker.changes() == [("up", "homelab-edge"), ("up", DEV), ("down", "homelab-mail", None)]
    assert said[0] == "edge: applying, waiting up to 30s for health"
    assert said[1].startswith("edge: healthy after ")
    assert said[-1] == "mail: taking down (no longer in the config)"
    acme = deployment.mount / "edge" / "acme" / "acme.json"
    assert stat.S_IMODE(acme.stat().st_mode) == 0o600 and acme.read_bytes() == b""
    gitea = deployment.mount / "gitea" / "data"
    assert gitea.is_dir() and stat.S_IMODE(gitea.stat().st_mode) == 0o750
    if os.geteuid() == 0:
        assert (gitea.stat().st_uid, gitea.stat().st_gid) == (1000, 1000)
    assert not (deployment.mount / "plex").exists()  # media was not applied


def test_folders_of_zfs_datasets_are_left_to_zfs(deployment: Deployment) -> None:
    zfs = FakeZfs()
    zfs.add_pool("tank")
    zfs.create("tank/homelab")
    zfs.create("tank/homelab/gitea")
    zfs.create("tank/homelab/gitea/data")
    docker = FakeDocker()
    apply.apply(apply.converge(deployment.plan, deployment.out, docker, ["dev"]), deployment.plan, docker, zfs=zfs)
    assert not (deployment.mount / "gitea" / "data").exists()
    assert (deployment.mount / "gitea" / "config").is_dir()


def test_no_zfs_at_all_means_every_folder_is_ours() -> None:
    zfs = FakeZfs()
    zfs.fail["names"] = CommandFailed(["zfs", "list"], 127, "", "zfs: not found")
    assert apply.zfs_dataset_names(zfs) == set()


def test_forced_services_are_handed_to_compose(deployment: Deployment) -> None:
    docker = FakeDocker(*_dev_running())
    _current(docker)
    convergence = apply.converge(
        deployment.plan, deployment.out, docker, ["dev"], changed_files=["secrets/gitea_secret_key"]
    )
    apply.apply(convergence, deployment.plan, docker, zfs=FakeZfs())
    assert docker.changes() == [("up", DEV, "gitea")]


def test_nothing_changed_hands_nothing_to_compose(deployment: Deployment) -> None:
    docker = FakeDocker(*_dev_running())
    _current(docker)
    convergence = apply.converge(deployment.plan, deployment.out, docker, ["dev"])
    assert not convergence.changed
    assert apply.apply(convergence, deployment.plan, docker, zfs=FakeZfs()).applied == []
    assert docker.changes() == []


def test_an_unhealthy_stack_stops_the_run_and_names_what_was_not_applied(deployment: Deployment) -> None:
    docker = FakeDocker()
    docker.health["gitea"] = "unhealthy"
    convergence = apply.converge(deployment.plan, deployment.out, docker, ["edge", "dev", "monitoring"])
    with pytest.raises(ApplyFailed) as caught:
        apply.apply(convergence, deployment.plan, docker, timeout=5, zfs=FakeZfs())
    assert str(caught.value).splitlines() == [
        "stack dev: service gitea is unhealthy; last health check: (no output)",
        "  stacks not applied: monitoring",
    ]
    assert docker.changes() == [("up", "homelab-edge"), ("up", DEV)]


EDGE = [container("homelab-edge", s) for s in ("traefik", "socket-proxy", "ddclient")]


def test_compose_failing_is_reported_with_its_last_line(deployment: Deployment) -> None:
    docker = FakeDocker(*EDGE)
    _current(docker)
    docker.up_error["homelab-edge"] = CommandFailed(
        ["docker", "compose", "up"], 1, "", "pulling traefik\nError response: manifest unknown"
    )
    convergence = apply.converge(
        deployment.plan, deployment.out, docker, ["edge", "dev"], changed_files=["edge/traefik/traefik.yml"]
    )
    with pytest.raises(ApplyFailed) as caught:
        apply.apply(convergence, deployment.plan, docker, zfs=FakeZfs())
    assert str(caught.value).splitlines() == [
        "stack edge: docker compose up failed: Error response: manifest unknown",
        "  stacks not applied: dev",
    ]
    assert caught.value.exit_code == 1


def test_compose_failing_before_creating_anything_names_every_service(deployment: Deployment) -> None:
    docker = FakeDocker()
    docker.up_error["homelab-edge"] = TimeoutError("compose did not finish within 300s")
    convergence = apply.converge(deployment.plan, deployment.out, docker, ["edge"])
    with pytest.raises(ApplyFailed) as caught:
        apply.apply(convergence, deployment.plan, docker, zfs=FakeZfs())
    assert str(caught.value).splitlines() == [
        f"stack edge: service {s} has no container (compose created none)"
        for s in ("ddclient", "socket-proxy", "traefik")
    ]


def test_compose_refusing_before_creating_anything_says_why(deployment: Deployment) -> None:
    docker = FakeDocker()
    docker.up_error["homelab-edge"] = CommandFailed(
        ["docker", "compose", "up"],
        1,
        "",
        "Error response from daemon: Pool overlaps with other one on this address space",
    )
    convergence = apply.converge(deployment.plan, deployment.out, docker, ["edge"])
    with pytest.raises(ApplyFailed) as caught:
        apply.apply(convergence, deployment.plan, docker, zfs=FakeZfs())
    assert str(caught.value).splitlines()[-1] == (
        "  docker compose up said: Error response from daemon: Pool overlaps with other one on this address space"
    )


def test_down_stops_running_stacks_in_reverse_order(deployment: Deployment) -> None:
    docker = FakeDocker(container("homelab-edge", "traefik"), *_dev_running())
    said: list[str] = []
    done = apply.down(deployment.plan, deployment.out, docker, ["edge", "media", "dev"], said.append)
    assert done == ["dev", "edge"]
    assert docker.changes() == [
        ("down", DEV, deployment.out / "dev"),
        ("down", "homelab-edge", deployment.out / "edge"),
    ]
    assert said == ["dev: stopping", "edge: stopping"]


def test_down_of_a_stack_whose_folder_is_gone_names_only_the_project(deployment: Deployment) -> None:
    docker = FakeDocker(*_dev_running())
    (deployment.out / "dev" / "compose.yaml").unlink()
    apply.down(deployment.plan, deployment.out, docker, ["dev"], lambda _: None)
    assert docker.changes() == [("down", DEV, None)]
