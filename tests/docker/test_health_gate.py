"""A service that never turns healthy: `up` fails within the timeout, names it and its last health
output, and starts neither its dependents nor later stacks. (Stand-in db whose pg_isready always fails.)"""

from __future__ import annotations

import time

import pytest
import standins
from dockerlab import make_deployment, remove_homelab_resources

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def sick_lab(world, images, tmp_path_factory):  # type: ignore[no-untyped-def]
    lab = make_deployment(
        tmp_path_factory.mktemp("sick-lab"),
        world,
        {"nextcloud": {"subdomain": "cloud"}, "rstudio": {}},
        extra_images={"db": images[standins.SICK]},
    )
    yield lab
    remove_homelab_resources()  # `down` is proven in test_up; here only the cleanup matters


def test_unhealthy_service_fails_up_and_blocks_dependents(sick_lab) -> None:  # type: ignore[no-untyped-def]
    began = time.monotonic()
    result = sick_lab.up("--timeout", "60", check=False)
    seconds = time.monotonic() - began
    assert result.returncode == 1, result.stdout + result.stderr
    assert seconds < 60 + 30
    err = result.stderr
    assert "stack cloud: service db is unhealthy; last health check: pg_isready: db stand-in is sick" in err, err
    assert "not started (waiting on it): cron, nextcloud" in err, err
    assert "stacks not applied: dev" in err, err
    containers = sick_lab.containers()
    assert containers["db"]["State"]["Health"]["Status"] == "unhealthy"
    assert containers["nextcloud"]["State"]["Status"] == "created"
    assert "rstudio" not in containers
    assert containers["traefik"]["State"]["Status"] == "running"  # the edge, applied first, stays up
