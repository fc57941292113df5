"""Issue 26 on the real engine (Compose): `up` answers for every declared service, not for what it deployed.

One deployment (the edge, Gitea and RStudio stand-ins), broken three ways in turn; each time `up` exits 1
naming the service and the engine's own reason, where before it said "no changes" (exit 0) or gave the
exit code without the cause:
- the edge's Traefik stopped by hand, then `up dev` (its routes go through the edge);
- RStudio's home folder (a bind source) removed under the running container;
- RStudio OOM-killed at its memory limit on every start (an entrypoint that grows without end).
"""

from __future__ import annotations

import shutil

import pytest
import yaml
from dockerlab import free_port, make_deployment, remove_homelab_resources
from standins import docker

pytestmark = pytest.mark.docker

RSTUDIO = "homelab-dev-rstudio-1"


@pytest.fixture(scope="module")
def lab(world, tmp_path_factory):  # type: ignore[no-untyped-def]
    apps = {"rstudio": {"resources": {"memory": "64m"}}, "gitea": {"ssh_port": free_port()}}
    deployment = make_deployment(tmp_path_factory.mktemp("declared"), world, apps)
    deployment.up("--timeout", "120")
    yield deployment
    remove_homelab_resources()


def _said(result) -> str:  # type: ignore[no-untyped-def]
    return result.stdout + result.stderr


def test_a_service_stopped_by_hand_fails_up_of_a_stack_served_through_it(lab) -> None:  # type: ignore[no-untyped-def]
    docker("stop", "homelab-edge-traefik-1")
    result = lab.homelab("up", "dev", "--timeout", "30", check=False)
    assert result.returncode == 1, _said(result)
    assert "edge/traefik: exited (exit code " in result.stderr, _said(result)
    status = lab.homelab("status", check=False)
    assert status.returncode == 1 and "down: edge/traefik: exited (exit code " in status.stdout, status.stdout
    repaired = lab.homelab("up", "--timeout", "60", check=False)  # `up` of the edge starts it again
    assert repaired.returncode == 0, _said(repaired)
    assert "start     edge/traefik" in repaired.stdout and "all healthy" in repaired.stdout, repaired.stdout


def test_a_bind_source_removed_under_a_running_service_fails_up(lab) -> None:  # type: ignore[no-untyped-def]
    home = lab.base / "tank" / "rstudio" / "home"
    assert home.is_dir()
    shutil.rmtree(home)
    result = lab.homelab("up", "--timeout", "30", check=False)
    assert result.returncode == 1, _said(result)
    assert f"dev/rstudio: running, but its bind source path does not exist: {home}" in result.stderr, _said(result)
    status = lab.homelab("status", "--json", check=False)
    assert status.returncode == 1
    docker("rm", "-f", RSTUDIO)  # bound to the removed folder: `up` makes it a new one
    assert lab.homelab("up", "--timeout", "60", check=False).returncode == 0
    assert home.is_dir()


def test_a_service_oom_killed_at_every_start_fails_up_naming_the_oom_kill(lab) -> None:  # type: ignore[no-untyped-def]
    override = lab.stacks_dir / "dev" / "compose.override.yaml"
    document = yaml.safe_load(override.read_text())
    grow = 'BEGIN { s = "0123456789abcdef"; while (1) s = s s }'
    document["services"]["rstudio"] = {
        **document["services"].get("rstudio", {}),
        "entrypoint": ["/.standin/busybox", "awk", grow],
    }
    override.write_text(yaml.safe_dump(document))
    first = lab.homelab("up", "--timeout", "20", check=False)
    assert first.returncode == 1, _said(first)
    assert "rstudio" in first.stderr and "OOM-killed at its memory limit" in first.stderr, _said(first)
    again = lab.homelab("up", "--timeout", "20", check=False)
    assert again.returncode == 1, _said(again)
    assert "rstudio" in again.stderr and "OOM-killed at its memory limit" in again.stderr, _said(again)
