"""`homelab up` with `edge.kind: nginx` on this machine's Docker Engine, end to end (issue 14).

Real: the Docker Engine, compose v2, the rendered compose files, nginx.conf, run.sh and certbot.sh, NGINX
(Debian's nginx-light, in an image made of the packages the rendered Dockerfile installs: see
standins.nginx_edge_image), certbot (Debian's, the real program, in an image with certbot/certbot's
entrypoint contract: standins.certbot_image) and Pebble as the ACME CA, validating HTTP-01 on the
edge's published HTTP port. Stand-ins: the apps (standins.faithful_image).

The life cycle: certbot's container writes a self-signed placeholder per name, NGINX starts on them,
certbot obtains a certificate per name from Pebble, installs it and bumps the serial, NGINX reloads
(the same container, no restart), every app answers over HTTPS with its Pebble certificate; a second
`up` changes nothing and orders nothing.
"""

from __future__ import annotations

import time

import pytest
import standins
from dockerlab import free_port, http_get, https_get, make_deployment, remove_homelab_resources, wait_for

pytestmark = pytest.mark.docker

APPS = {
    "plex": {"transcode_device": None},  # no /dev/dri here
    "gitea": {"subdomain": "git"},  # its SSH port is published by gitea itself: NGINX forwards no TCP
    "jenkins": {"subdomain": "ci", "lan_only": True},  # LAN = 127/8 + 172.16/12 in this test
}
IMAGES = {"nginx": f"{standins.PREFIX}/nginx:edge", "certbot": f"{standins.PREFIX}/certbot:edge"}
ISSUED_WITHIN = 90  # certbot.sh's first wait (10 s), three HTTP-01 orders, NGINX's 5 s serial poll


@pytest.fixture(scope="module")
def lab(world, pebble, tmp_path_factory):  # type: ignore[no-untyped-def]
    apps = {**APPS, "gitea": {**APPS["gitea"], "ssh_port": free_port()}}
    base = tmp_path_factory.mktemp("nginx-edge")
    deployment = make_deployment(base, world, apps, extra_images=IMAGES)
    deployment.data["edge"]["kind"] = "nginx"
    deployment.data["domain"]["acme"]["challenge"] = "http"  # certbot's webroot
    deployment.write()
    began = time.monotonic()
    deployment.homelab("render")
    try:
        # the images the rendered files ask for, made here (no registry): NGINX from the rendered Dockerfile
        dockerfile = (deployment.stacks_dir / "edge" / "nginx" / "Dockerfile").read_text()
        standins.nginx_edge_image(base, dockerfile, tag=IMAGES["nginx"])
        standins.certbot_image(base, pebble[1], tag=IMAGES["certbot"])
        deployment.orders_before = deployment.pebble.orders()  # type: ignore[attr-defined]  # other modules' labs
        deployment.first_up = deployment.up("--timeout", "120")  # type: ignore[attr-defined]
        print(f"render, images and first up: {time.monotonic() - began:.1f}s")
        yield deployment
    finally:
        remove_homelab_resources()
        standins.docker("rmi", "-f", *IMAGES.values(), check=False)


def _logs(container: str) -> str:
    proc = standins.docker("logs", container, check=False)
    return proc.stdout + proc.stderr


def _pebble_issued(lab, host: str) -> tuple[str, dict]:  # type: ignore[no-untyped-def]
    """(body, certificate) once `host` answers 200 with a chain that verifies against Pebble's root."""

    def issued():  # type: ignore[no-untyped-def]
        status, _, body, cert = https_get(lab.https_port, host, root_pem=lab.pebble.root_pem)
        return (body, cert) if status == 200 else None

    try:
        return wait_for(issued, ISSUED_WITHIN, f"a Pebble certificate for {host}")
    except AssertionError as exc:
        logs = "\n".join(f"--- {c}\n{_logs(c)[-3000:]}" for c in ("homelab-edge-certbot-1", "homelab-edge-nginx-1"))
        raise AssertionError(f"{exc}\n{logs}") from exc


def test_placeholders_then_a_pebble_certificate_for_every_app_without_a_restart(lab) -> None:  # type: ignore[no-untyped-def]
    output = lab.first_up.stdout
    assert "create    edge/nginx" in output and "create    edge/certbot" in output, output
    assert "all healthy" in output, output
    nginx_before = lab.containers()["nginx"]
    for app, host in lab.hosts().items():
        body, cert = _pebble_issued(lab, host)
        assert body.strip() == app, f"{host} routed to the wrong service: {body!r}"
        assert host in [value for kind, value in cert.get("subjectAltName", ()) if kind == "DNS"]
        assert dict(x[0] for x in cert["issuer"])["commonName"].startswith("Pebble Intermediate CA")
    assert lab.pebble.orders() - lab.orders_before == len(lab.hosts())

    certbot_log = _logs("homelab-edge-certbot-1")
    for host in lab.hosts().values():
        assert f"certbot: {host}: self-signed placeholder" in certbot_log, certbot_log
        assert f"certbot: {host}: certificate installed for NGINX" in certbot_log, certbot_log
    # the certificates reached NGINX by a reload of the container that served the placeholders
    nginx = lab.containers()["nginx"]
    assert (nginx["Id"], nginx["State"]["StartedAt"]) == (nginx_before["Id"], nginx_before["State"]["StartedAt"])
    assert nginx["RestartCount"] == 0
    assert "nginx: reloaded for certificate serial" in _logs("homelab-edge-nginx-1")
    served = lab.base / "tank" / "edge" / "letsencrypt" / "edge"
    assert sorted(p.name for p in served.iterdir() if p.is_dir()) == sorted(lab.hosts().values())


def test_http_redirects_and_only_the_edge_publishes_web_ports(lab) -> None:  # type: ignore[no-untyped-def]
    status, headers, _ = http_get(lab.http_port, "git.example.com", "/explore")
    assert status == 301 and headers["location"] == f"https://git.example.com:{lab.https_port}/explore"
    status, headers, _, _ = https_get(lab.https_port, "ci.example.com", root_pem=lab.pebble.root_pem)
    assert status == 200 and headers["strict-transport-security"].startswith("max-age=")
    published = {
        name: {inside: [b["HostPort"] for b in outside] for inside, outside in c["HostConfig"]["PortBindings"].items()}
        for name, c in lab.containers().items()
        if c["HostConfig"]["PortBindings"]
    }
    web = {"80/tcp": [str(lab.http_port)], "443/tcp": [str(lab.https_port)]}
    assert published == {"nginx": web, "gitea": {"2222/tcp": [str(lab.data["apps"]["gitea"]["ssh_port"])]}}, published


def _identity(lab) -> dict[str, tuple[str, str]]:  # type: ignore[no-untyped-def]
    return {name: (c["Id"], c["State"]["StartedAt"]) for name, c in lab.containers().items()}


def test_second_up_changes_nothing(lab) -> None:  # type: ignore[no-untyped-def]
    for host in lab.hosts().values():  # issuance finished (the first test waits for it too)
        _pebble_issued(lab, host)
    before, orders = _identity(lab), lab.pebble.orders()
    result = lab.up()
    assert "no changes" in result.stdout, result.stdout
    assert _identity(lab) == before
    time.sleep(1)
    assert lab.pebble.orders() == orders
