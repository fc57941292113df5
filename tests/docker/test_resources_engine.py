"""Issue 20's proofs on the real engine, with the faithful stand-ins:
- `docker inspect` of every service shows the memory limit, reservation, pids limit, CPU weight, dropped
  and added capabilities, read-only root and tmpfs mounts the catalog declares (read from compose/*.yaml here, not
  through homelab), and the services turned healthy with them;
- each image started as root runs with exactly the capabilities its facts list and exits without any one
  of them (a stand-in that needs a dropped capability fails);
- a stand-in that grows past its memory limit is OOM-killed and restarted by its policy while the others
  stay healthy throughout, and `homelab status` (table and --json) shows the OOM kill and the restarts;
- a stand-in that forks without end stops at its pids limit while the others stay healthy and the host
  still forks and answers.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import yaml
from dockerlab import free_port, make_deployment, remove_homelab_resources, wait_for
from standins import docker, faithful_image

from homelab.images.facts import all_facts

pytestmark = pytest.mark.docker

CATALOG = Path(__file__).resolve().parents[2] / "compose"
HOG_LIMIT = "64m"  # the runaway's limit in this test: small, so the host never feels it
FORK_LIMIT = 64


def _bytes(size: str) -> int:
    number, unit = re.fullmatch(r"(\d+)([kmg])", size.lower()).groups()  # type: ignore[union-attr]
    return int(number) * 1024 ** (1 + "kmg".index(unit))


def _declared() -> dict[str, dict]:
    """service -> its `resources` and `cap_drop` as compose/*.yaml states them."""
    out = {}
    for path in CATALOG.glob("*.yaml"):
        for name, spec in (yaml.safe_load(path.read_text()).get("services") or {}).items():
            out[name] = {
                "resources": spec["resources"],
                "cap_drop": spec.get("cap_drop"),
                "cap_add": spec.get("cap_add", []),
                "read_only": spec.get("read_only", False),
                "tmpfs": spec.get("tmpfs", []),
            }
    return out


@pytest.fixture(scope="module")
def lab(world, tmp_path_factory):  # type: ignore[no-untyped-def]
    apps = {
        "rstudio": {"resources": {"memory": HOG_LIMIT}},
        "gitea": {"ssh_port": free_port(), "resources": {"pids": FORK_LIMIT}},
    }
    deployment = make_deployment(tmp_path_factory.mktemp("resources"), world, apps)
    deployment.up("--timeout", "120")
    yield deployment
    remove_homelab_resources()


def _state(name: str) -> dict:
    return json.loads(docker("inspect", name).stdout)[0]["State"]


def _others_healthy(lab, skip: str) -> None:  # type: ignore[no-untyped-def]
    for service, container in lab.containers().items():
        if service != skip and container["Config"].get("Healthcheck"):
            assert container["State"]["Health"]["Status"] == "healthy", f"{service} left healthy"


def test_inspect_shows_the_declared_limits_and_capabilities(lab) -> None:  # type: ignore[no-untyped-def]
    declared = _declared()
    overrides = {"rstudio": {"memory": HOG_LIMIT, "reservation": HOG_LIMIT}, "gitea": {"pids": FORK_LIMIT}}
    containers = lab.containers()
    assert set(containers) == {"traefik", "socket-proxy", "gitea", "rstudio"}
    for service, container in containers.items():
        want = {**declared[service]["resources"], **overrides.get(service, {})}
        host = container["HostConfig"]
        assert host["Memory"] == _bytes(want["memory"]), service
        assert host["MemoryReservation"] == _bytes(want["reservation"]), service
        assert host["PidsLimit"] == want["pids"], service
        assert host["CpuShares"] == want["cpu_weight"], service
        assert (host["CapDrop"] or None) == declared[service]["cap_drop"], service
        assert sorted(c.removeprefix("CAP_") for c in host["CapAdd"] or []) == sorted(declared[service]["cap_add"])
        assert host["ReadonlyRootfs"] == declared[service]["read_only"], service
        assert sorted(host.get("Tmpfs") or {}) == sorted(declared[service]["tmpfs"]), service
        assert "no-new-privileges:true" in host["SecurityOpt"]
        assert container["State"]["Health"]["Status"] == "healthy", service


def test_a_runaway_is_oom_killed_and_restarted_while_the_others_stay_healthy(lab) -> None:  # type: ignore[no-untyped-def]
    name = "homelab-dev-rstudio-1"
    restarts = json.loads(docker("inspect", name).stdout)[0]["RestartCount"]
    since = str(int(time.time()) - 1)
    docker("exec", name, "/.standin/busybox", "touch", "/tmp/standin-hog")

    def restarted_and_healthy() -> bool:
        _others_healthy(lab, skip="rstudio")
        data = json.loads(docker("inspect", name).stdout)[0]
        return data["RestartCount"] > restarts and data["State"]["Health"]["Status"] == "healthy"

    wait_for(restarted_and_healthy, 120, "rstudio OOM-killed, restarted and healthy again", interval=0.5)
    events = docker(
        "events",
        "--since",
        since,
        "--until",
        str(int(time.time()) + 1),
        "--filter",
        f"container={name}",
        "--filter",
        "event=oom",
        "--format",
        "{{.Action}}",
    ).stdout.split()
    assert "oom" in events, events
    _others_healthy(lab, skip="")
    # `homelab status` reports it: the OOM kill, the restarts, the memory in use against the 64 MiB limit
    rows = {r["service"]: r for r in json.loads(lab.homelab("status", "--json", check=False).stdout)["services"]}
    rstudio = rows["rstudio"]
    assert rstudio["oom_killed"] is True and rstudio["restarts"] > restarts, rstudio
    assert rstudio["memory"].endswith(" MiB / 64 MiB"), rstudio
    assert rows["gitea"]["oom_killed"] is False and rows["gitea"]["memory"].endswith(" / 1024 MiB"), rows["gitea"]
    table = lab.homelab("status", check=False).stdout.splitlines()
    assert any(line.startswith("dev/rstudio ") and line.endswith("(OOM-killed)") for line in table), table


def test_a_fork_bomb_stops_at_the_pids_limit(lab) -> None:  # type: ignore[no-untyped-def]
    name = "homelab-dev-gitea-1"
    # every process forks a child and waits for it, forever: the tree stays at the limit (the stand-in's
    # main process forks nothing more, so the container stays up, like an app whose children fail)
    bomb = docker("exec", "-d", name, "/.standin/sh", "-c", "b() { while :; do b & wait; done; }; b", check=False)
    assert bomb.returncode == 0, bomb.stderr

    def at_limit() -> bool:
        _others_healthy(lab, skip="gitea")
        pids = int(docker("stats", "--no-stream", "--format", "{{.PIDs}}", name).stdout.strip() or 0)
        assert pids <= FORK_LIMIT
        return pids >= FORK_LIMIT - 2

    wait_for(at_limit, 120, f"gitea's processes to reach its pids limit {FORK_LIMIT}", interval=0.5)
    _others_healthy(lab, skip="gitea")
    # the host stays responsive with the bomb at its limit: it forks and runs programs at once (a
    # generous bound on this shared 2-core machine), and the edge still answers through the engine
    start = time.monotonic()
    for _ in range(20):
        subprocess.run(["true"], check=True)
    assert time.monotonic() - start < 10
    assert lab.homelab("status", "--json", check=False).returncode in (0, 1)
    docker("restart", "-t", "1", name)  # ends the bomb; the service comes back on its own
    wait_for(lambda: _state(name).get("Health", {}).get("Status") == "healthy", 120, "gitea after the restart")


# the images started as root whose capabilities are worked out (homelab/images/facts/*.yaml `capabilities`),
# by the service the `images` fixture builds their stand-in for (graphite's is built here: no test deploys it);
# not redis: homelab starts it as 999:1000 (test_first_start.py shows why)
ROOT_IMAGES = {
    "db": "postgres:16.6-alpine",
    "nextcloud": "nextcloud:30.0.4-apache",
    "plex": "plexinc/pms-docker:1.41.3.9314-a0bfb8370",
    "graphite": "graphiteapp/graphite-statsd:1.1.10-5",
    "rstudio": "rocker/rstudio:4.4.2",
}
NEXTCLOUD_ENV = {"NEXTCLOUD_ADMIN_USER": "admin", "NEXTCLOUD_ADMIN_PASSWORD": "example", "POSTGRES_HOST": "db"}
# the folder a start-up operation writes into as the uid the image drops to, which the service mounts from
# its dataset: Nextcloud's data (33:33, compose/nextcloud.yaml), where occ's install writes .ocdata
DATASET_MOUNTS = {"nextcloud": ["--tmpfs", "/var/www/data:uid=33,gid=33,mode=0750"]}


@pytest.fixture(scope="module")
def root_images(images, tmp_path_factory) -> dict[str, str]:  # type: ignore[no-untyped-def]
    graphite = faithful_image(tmp_path_factory.mktemp("graphite"), all_facts()[ROOT_IMAGES["graphite"]])
    return {**images, "graphite": graphite}


@pytest.mark.parametrize("service", sorted(ROOT_IMAGES))
def test_a_root_image_runs_with_exactly_its_capabilities_and_not_one_less(root_images, service: str) -> None:  # type: ignore[no-untyped-def]
    """cap_drop ALL + cap_add the facts' list: the stand-in (which does, as root, what the entrypoint does
    with each capability: chown, write and chmod a file another uid owns, signal a process of the uid it
    drops to, switch its server to that uid; and the image's start-up operations, facts `startup`) serves
    its health path; without any one of them it exits.
    Not shown failing: NET_BIND_SERVICE (Docker >= 20.10 lets any uid bind :80 in a container:
    ip_unprivileged_port_start)."""
    facts = all_facts()[ROOT_IMAGES[service]]
    caps = sorted(facts.capabilities or {})
    env = [arg for key, value in NEXTCLOUD_ENV.items() for arg in ("-e", f"{key}={value}")]
    env += DATASET_MOUNTS.get(service, [])
    for missing_cap in [c for c in caps if c != "NET_BIND_SERVICE"]:
        adds = [arg for c in caps if c != missing_cap for arg in ("--cap-add", c)]
        run = docker("run", "--rm", "--cap-drop", "ALL", *adds, *env, root_images[service], check=False, timeout=60)
        assert run.returncode != 0, f"{service} ran without CAP_{missing_cap}: {run}"
        # the stand-in's own check of that capability, or an earlier start-up operation of the image's facts
        # that needs it (Postgres's walk of the 0700 PGDATA without DAC_OVERRIDE, Nextcloud's rsync --chown)
        said = f"needs CAP_{missing_cap}" in run.stderr or "start-up operation" in run.stderr
        assert said or missing_cap in ("SETUID", "SETGID"), run.stderr
    name = f"homelab-test-caps-{uuid.uuid4().hex[:8]}"
    adds = [arg for c in caps for arg in ("--cap-add", c)]
    docker("run", "-d", "--name", name, "--cap-drop", "ALL", *adds, *env, root_images[service])
    try:
        health = facts.health
        url = f"http://127.0.0.1:{health.port}{health.path or '/'}"  # type: ignore[union-attr]
        probe = ["exec", name, "/.standin/busybox", "wget", "-q", "-O", "/dev/null", url]
        wait_for(lambda: docker(*probe, check=False).returncode == 0, 60, f"{service} with exactly {caps}")
        users = docker("exec", name, "/.standin/busybox", "ps", "-o", "user,args").stdout.splitlines()
        assert any(line.split()[0] == "app" and "httpd" in line for line in users), users  # as gosu/su-exec do
    finally:
        docker("rm", "-f", name, check=False)
