"""Contract: the rendered nginx.conf, checked by `nginx -t` and run by the real nginx on loopback,
routes, redirects, adds headers, allow-lists and passes large uploads exactly as intended.

Changed for the test: the parameters nginx_conf() takes for this purpose (listen addresses, certificate
folder, health listener, upstream addresses -> local backends instead of Docker service names, worker
user -> one this machine has), and the compiled-in writable paths (temp folders, access log, pid, error
log) pointed into the test folder. Certificates are laid out one folder per name, with certbot's
root-only modes: the root master reads them, the unprivileged workers never do.

The certificate life cycle runs the rendered certbot.sh and run.sh themselves, with a stand-in for
certbot that "issues" what the test CA left for it: placeholders first, NGINX up on them, then the
issued certificates and a renewal served after the scripts' reloads.
"""

from __future__ import annotations

import http.client
import os
import shutil
import socket
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509

from homelab.plan_model import Plan
from homelab.render.edge_nginx import certbot_sh, nginx_conf
from tests.contract.edge_contract import CLOUD, WEBSOCKET_HOST, EdgeContract
from tests.contract.edge_support import (
    Edge,
    LocalCA,
    client_context,
    example_plan,
    first_certificate,
    http_plain,
    nginx_edge,
    nginx_worker_user,
    program,
    running,
    wait_until,
    worker_users,
)

pytestmark = pytest.mark.real


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("nginx")


@pytest.fixture(scope="module")
def pki(folder: Path) -> LocalCA:
    return LocalCA(folder / "pki")


@pytest.fixture(scope="module")
def plan(folder: Path) -> Plan:
    return example_plan(folder / "example", kind="nginx")


@pytest.fixture(scope="module")
def edge(plan: Plan, folder: Path, pki: LocalCA) -> Iterator[Edge]:
    with nginx_edge(plan, folder / "run", pki) as running_edge:
        yield running_edge


@pytest.fixture(scope="module")
def lan_edge(folder: Path, pki: LocalCA) -> Iterator[Edge]:
    """The example with 127.0.0.1 in edge.lan_cidrs: the test client counts as LAN."""
    plan = example_plan(folder / "example-lan", kind="nginx", lan_cidrs=["192.168.1.0/24", "127.0.0.1/32"])
    with nginx_edge(plan, folder / "run-lan", pki) as running_edge:
        yield running_edge


class TestEdgeContract(EdgeContract):
    """Routing, headers, LAN allow-list, SNI and upload limits, as every edge kind must (NGINX here)."""


def test_production_defaults_name_docker_services(plan: Plan) -> None:
    """The injectable upstreams and listeners default to what the container needs."""
    text = nginx_conf(plan)
    assert "upstream nextcloud {\n        server nextcloud:80;\n" in text
    assert "proxy_pass http://nextcloud;" in text
    assert "$upstream" not in text  # a variable in proxy_pass would keep no connection to the app
    assert "listen 443 ssl http2;" in text
    assert "listen 127.0.0.1:8081;" in text
    assert "ssl_certificate /etc/letsencrypt/edge/cloud.example.com/fullchain.pem;" in text
    assert "ssl_certificate_key /etc/letsencrypt/edge/cloud.example.com/privkey.pem;" in text
    assert "$ssl_server_name" not in text  # no per-handshake loading: the workers never read a key
    assert "\nuser www-data;\n" in text  # the unprivileged user of Debian's package, which the image installs
    assert "user root" not in text


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="nginx switches worker users only when started as root")


@needs_root
def test_workers_run_unprivileged(edge: Edge) -> None:
    """The master (root) read the root-only keys; `ps` shows every worker as the unprivileged user."""
    users = worker_users(edge.process.pid)
    assert len(users) == 2, users
    assert set(users) == {nginx_worker_user()} and "root" not in users


@pytest.mark.parametrize("host", ["git.example.com", WEBSOCKET_HOST])
def test_requests_reuse_the_connection_to_the_app(edge: Edge, host: str) -> None:
    """Requests over one client connection reach the app over one kept-alive upstream connection (the
    app sees one client port), on a plain route and on a websocket-enabled one."""
    with (
        socket.create_connection(("127.0.0.1", edge.https_port), timeout=10) as raw,
        client_context(edge.ca_file).wrap_socket(raw, server_hostname=host) as tls,
    ):
        connection = http.client.HTTPConnection(host, edge.https_port, timeout=10)
        connection.sock = tls
        peers = []
        for number in range(3):
            connection.request("GET", f"/{number}", headers={"Host": host})
            response = connection.getresponse()
            assert response.status == 200, response.read()
            response.read()
            peers.append(response.headers["X-Backend-Peer"])
    assert len(set(peers)) == 1, peers


def test_a_stopped_app_does_not_stop_the_edge(plan: Plan, folder: Path, pki: LocalCA) -> None:
    """NGINX refuses to start on an upstream name that does not resolve (a stopped container's, in
    Docker's DNS); run.sh starts it anyway with that app marked down (502, the others served), and
    reloads when the name resolves again or stops resolving."""
    getent = program("getent")
    base = folder / "stopped"
    stand_ins, gone = base / "stand-ins", base / "gone"
    stand_ins.mkdir(parents=True)
    gone.mkdir()
    # getent as Docker's DNS answers it: a name with a file in gone/ belongs to a stopped container
    (stand_ins / "getent").write_text(f'#!/bin/sh\n[ -e "{gone}/$2" ] && exit 2\nexec {getent} "$@"\n')
    (stand_ins / "getent").chmod(0o755)
    (gone / "localhost").touch()
    upstreams = {"gitea": "gitea.invalid:3000", "nextcloud": "localhost:{port}"}
    run_sh = {"poll_seconds": 1}
    with nginx_edge(plan, base / "run", pki, run_sh=run_sh, upstreams=upstreams, path=stand_ins) as edge:
        check = subprocess.run([*edge.extra["nginx"], "-t"], capture_output=True, text=True, timeout=30)
        assert check.returncode != 0 and "host not found in upstream" in check.stderr, check.stderr
        log = base / "run" / "nginx.out"
        wait_until(lambda: edge.https("plex.example.com").status == 200, "nginx up", edge.process, log)
        assert edge.https("git.example.com").status == 502
        assert edge.https(CLOUD).status == 502
        (gone / "localhost").unlink()  # nextcloud's container starts
        wait_until(lambda: edge.https(CLOUD).status == 200, "nginx to reach nextcloud", edge.process, log)
        assert edge.https(CLOUD, "/x").body == "nextcloud GET /x 0 https\n"
        (gone / "localhost").touch()  # and stops again
        wait_until(lambda: edge.https(CLOUD).status == 502, "nginx to mark nextcloud down", edge.process, log)
        assert edge.https("plex.example.com").status == 200
        assert edge.process.poll() is None


def test_http_redirects_to_https(edge: Edge) -> None:
    response = edge.http(CLOUD, "/index.php?x=1")
    assert response.status == 301
    assert response.headers["Location"] == f"https://{CLOUD}/index.php?x=1"


def test_acme_challenge_is_served_over_http(edge: Edge) -> None:
    response = edge.http(CLOUD, "/.well-known/acme-challenge/token")
    assert response.status == 404  # from the webroot (absent here), not a redirect
    assert "Location" not in response.headers


def test_health_endpoint(edge: Edge) -> None:
    response = http_plain(edge.extra["health_port"], "localhost", "/healthz")
    assert response.status == 200
    assert response.body == "ok\n"


# --- the certificate life cycle ------------------------------------------------------------------

# certbot's stand-in: `certonly --cert-name NAME` and `renew` put what the test CA left in $ISSUE/NAME/
# into live/NAME/ the way certbot does (numbered files in archive/, symlinks in live/); nothing there
# for a name means the CA refused it.
CERTBOT_STUB = """#!/bin/sh
echo "$*" >>"$CALLS"
issue() {
    [ -s "$ISSUE/$1/fullchain.pem" ] || return 1
    if cmp -s "$ISSUE/$1/fullchain.pem" "$LE/live/$1/fullchain.pem"; then return 0; fi
    mkdir -p "$LE/archive/$1" "$LE/live/$1"
    chmod 700 "$LE/archive" "$LE/live"
    n=$(($(ls "$LE/archive/$1" | grep -c fullchain) + 1))
    cp "$ISSUE/$1/privkey.pem" "$LE/archive/$1/privkey$n.pem"
    cp "$ISSUE/$1/fullchain.pem" "$LE/archive/$1/fullchain$n.pem"
    ln -sfn "../../archive/$1/privkey$n.pem" "$LE/live/$1/privkey.pem"
    ln -sfn "../../archive/$1/fullchain$n.pem" "$LE/live/$1/fullchain.pem"
}
case "$1" in
certonly)
    while [ $# -gt 0 ]; do [ "$1" = --cert-name ] && name=$2; shift; done
    issue "$name" ;;
renew)
    for live in "$LE"/live/*/; do [ -d "$live" ] && issue "$(basename "$live")"; done
    exit 0 ;;
esac
"""


def hand_to_ca(pki: LocalCA, issue: Path, host: str) -> x509.Certificate:
    """A fresh test-CA pair for `host` where the stand-in finds it (key first, chain last: atomic)."""
    fullchain, privkey = pki.leaf(host)
    (issue / host).mkdir(parents=True, exist_ok=True)
    for source in (privkey, fullchain):
        shutil.copyfile(source, issue / host / f"{source.name}.tmp")
        (issue / host / f"{source.name}.tmp").rename(issue / host / source.name)
    return first_certificate(fullchain)


def served_by_ca(edge: Edge, host: str) -> bool:
    """A handshake verified against the test CA (LAN-only names answer 403, after the handshake)."""
    try:
        return edge.https(host).status in (200, 403)
    except ssl.SSLCertVerificationError:
        return False


def test_certificate_life_cycle_placeholders_issue_and_renewal(plan: Plan, folder: Path, pki: LocalCA) -> None:
    program("openssl")
    base = folder / "life"
    le, issue, bin_dir = base / "letsencrypt", base / "issue", base / "bin"
    edge_dir = le / "edge"
    for path in (le, issue, bin_dir):
        path.mkdir(parents=True)
    le.chmod(0o700)
    (bin_dir / "certbot").write_text(CERTBOT_STUB)
    (bin_dir / "certbot").chmod(0o755)
    (base / "certbot.sh").write_text(
        certbot_sh(plan, config_dir=str(le), edge_dir=str(edge_dir), first_wait=0, interval="1")
    )
    environment = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "LE": str(le),
        "ISSUE": str(issue),
        "CALLS": str(base / "calls"),
    }
    argv = ["/usr/bin/env", *(f"{k}={v}" for k, v in environment.items()), "/bin/sh", str(base / "certbot.sh")]
    hosts = [r.host for r in plan.routes]
    with running(argv, base / "certbot.out", base) as certbot:
        # 1. the CA has refused everything so far: a self-signed placeholder per name, root-only
        wait_until(
            lambda: (edge_dir / "serial").exists(), "certbot.sh to write placeholders", certbot, base / "certbot.out"
        )
        wait_until(
            lambda: "renew" in (base / "calls").read_text(), "a first certbot round", certbot, base / "certbot.out"
        )
        for host in hosts:
            placeholder = first_certificate(edge_dir / host / "fullchain.pem")
            assert placeholder.issuer == placeholder.subject
            assert placeholder.extensions.get_extension_for_class(
                x509.SubjectAlternativeName
            ).value.get_values_for_type(x509.DNSName) == [host]
            assert (edge_dir / host / "privkey.pem").stat().st_mode & 0o777 == 0o600
            assert (edge_dir / host).stat().st_mode & 0o077 == 0
        assert (edge_dir / "serial").read_text() == "1\n"

        run_sh = {"edge_dir": str(edge_dir), "poll_seconds": 1}
        with nginx_edge(plan, base / "run", pki, run_sh=run_sh, cert_dir=edge_dir) as edge:
            # 2. NGINX starts on the placeholders: it completes handshakes, but nobody trusts them
            check = subprocess.run([*edge.extra["nginx"], "-t"], capture_output=True, text=True, timeout=30)
            assert check.returncode == 0, check.stderr
            log = base / "run" / "nginx.out"
            wait_until(lambda: edge.handshake_error(hosts[0]) is None, "nginx on placeholders", edge.process, log)
            for host in hosts:
                assert edge.served_certificate(host) == first_certificate(edge_dir / host / "fullchain.pem")
                with pytest.raises(ssl.SSLCertVerificationError):
                    edge.https(host)
            assert edge.http(CLOUD, "/x").status == 301
            if os.geteuid() == 0:
                assert set(worker_users(edge.process.pid)) == {nginx_worker_user()}

            # 3. the CA issues: certbot.sh copies each certificate over its placeholder, bumps the
            # serial, run.sh reloads NGINX, which serves them
            issued = {host: hand_to_ca(pki, issue, host) for host in hosts}
            for host in hosts:
                wait_until(
                    lambda host=host: served_by_ca(edge, host), f"the issued certificate for {host}", edge.process, log
                )
                assert edge.served_certificate(host) == issued[host]
            assert (edge_dir / "serial").read_text() == "2\n"
            assert "nginx: reloaded for certificate serial 2" in log.read_text()
            assert edge.https(CLOUD, "/after").body == "nextcloud GET /after 0 https\n"

            # 4. a renewal of one name: copied and reloaded the same way
            renewed = hand_to_ca(pki, issue, CLOUD)
            wait_until(lambda: edge.served_certificate(CLOUD) == renewed, "the renewed certificate", edge.process, log)
            assert edge.served_certificate("git.example.com") == issued["git.example.com"]
            assert (edge_dir / "serial").read_text() == "3\n"
            if os.geteuid() == 0:
                assert set(worker_users(edge.process.pid)) == {nginx_worker_user()}
    calls = (base / "calls").read_text().splitlines()
    assert sum(f"--cert-name {CLOUD}" in call for call in calls) >= 2  # refused, then issued
