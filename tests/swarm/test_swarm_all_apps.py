"""Every app of the catalog deployed straight onto the one-node swarm (engine: swarm from the first `up`):
each answers over HTTPS through Traefik's swarm provider with a certificate Pebble issued for its name;
`status` and `logs` work on swarm; then `homelab down` takes the stacks away so the next lab
(test_swarm_up.py) meets an empty swarm."""

from __future__ import annotations

import pytest
import standins
from dockerlab import free_port, https_get, remove_homelab_resources, wait_for

from tests.swarm.conftest import make_swarm_deployment, swarm_diagnostics

pytestmark = pytest.mark.docker

APPS = {
    "plex": {"transcode_device": None},  # no /dev/dri here (and Swarm services take no devices)
    "nextcloud": {"subdomain": "cloud"},
    "gitea": {"subdomain": "git"},
    "jenkins": {"subdomain": "ci", "lan_only": True},  # LAN = 127/8 + 172.16/12 (docker_gwbridge: conftest)
    "rstudio": {},
}


def test_every_app_answers_over_https_through_the_swarm_provider(swarm, world, tmp_path) -> None:  # type: ignore[no-untyped-def]
    apps = {**APPS, "gitea": {**APPS["gitea"], "ssh_port": free_port()}}
    lab = make_swarm_deployment(tmp_path / "all", world, apps)
    lab.data["engine"] = "swarm"
    lab.write()
    orders_before = lab.pebble.orders()
    try:
        result = lab.up("--timeout", "240")
        assert "all healthy" in result.stdout, result.stdout
        assert not lab.containers(), "compose containers on a swarm deployment"
        for app, host in lab.hosts().items():

            def serving(host: str = host):  # type: ignore[no-untyped-def]
                status, _, body, cert = https_get(lab.https_port, host, root_pem=lab.pebble.root_pem)
                if status != 200:  # wait_for reports the last exception: say what the edge answered
                    raise ValueError(f"HTTP {status}: {body[:200]!r}")
                return body, cert

            try:
                body, cert = wait_for(serving, 90, f"{host} over HTTPS with a Pebble certificate")
            except AssertionError as exc:
                raise AssertionError(f"{exc}\n{swarm_diagnostics(lab)}") from None
            assert body.strip() == app, f"{host} routed to the wrong service: {body!r}"
            assert host in [value for kind, value in cert.get("subjectAltName", ()) if kind == "DNS"]
            assert dict(x[0] for x in cert["issuer"])["commonName"].startswith("Pebble Intermediate CA")
        assert lab.pebble.orders() - orders_before == len(lab.hosts())
        status = lab.homelab("status")  # exit 0: every service converged and healthy
        for service in ("edge/traefik", "cloud/nextcloud", "dev/gitea", "dev/jenkins", "media/plex"):
            assert service in status.stdout, status.stdout
        lab.homelab("down")
        assert not lab.services(), "services left after down"
        gone = lab.homelab("logs", "traefik", check=False)
        assert gone.returncode == 4, gone.stdout + gone.stderr
        assert "edge/traefik is not deployed on the swarm: run `homelab up` first" in gone.stderr, gone.stderr
    finally:
        for stack in standins.docker("stack", "ls", "--format", "{{.Name}}", check=False).stdout.split():
            if stack.startswith("homelab-"):
                standins.docker("stack", "rm", stack, check=False)
        wait_for(lambda: not lab.services(), 60, "the swarm stacks to go")
        remove_homelab_resources()
