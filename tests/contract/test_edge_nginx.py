"""Contract: the rendered nginx.conf, checked by `nginx -t` and run by the real nginx on loopback,
routes, redirects, adds headers, allow-lists and passes large uploads exactly as intended.

Changed for the test: the parameters nginx_conf() takes for this purpose (listen addresses, certificate
folder, health listener, upstream addresses -> local backends instead of Docker service names), and the
compiled-in writable paths (temp folders, access log, pid, error log) pointed into the test folder.
Certificates are laid out like certbot's live/ folder, with its root-only modes.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from homelab.plan import Plan, Route
from homelab.render.edge_nginx import nginx_conf
from tests.contract.edge_support import Edge, LocalCA, example_plan, http_plain, nginx_edge

pytestmark = pytest.mark.real

CLOUD = "cloud.example.com"


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


def public_routes(plan: Plan) -> list[Route]:
    return [r for r in plan.routes if not r.lan_only]


def lan_routes(plan: Plan) -> list[Route]:
    routes = [r for r in plan.routes if r.lan_only]
    assert {r.host for r in routes} >= {"ci.example.com", "grafana.example.com"}
    return routes


def test_production_defaults_name_docker_services(plan: Plan) -> None:
    """The injectable upstreams and listeners default to what the container needs."""
    text = nginx_conf(plan)
    assert "set $upstream http://nextcloud:80;" in text
    assert "resolver 127.0.0.11" in text
    assert "listen 443 ssl http2;" in text
    assert "listen 127.0.0.1:8081;" in text
    assert "ssl_certificate /etc/letsencrypt/live/$ssl_server_name/fullchain.pem;" in text


def test_each_host_reaches_its_own_backend_over_https(edge: Edge, plan: Plan) -> None:
    for route in public_routes(plan):
        response = edge.https(route.host, "/some/path?q=1")
        assert response.status == 200, (route.host, response.status, response.body)
        assert response.body == f"{route.app} GET /some/path?q=1 0 https\n"


def test_http_redirects_to_https(edge: Edge) -> None:
    response = edge.http(CLOUD, "/index.php?x=1")
    assert response.status == 301
    assert response.headers["Location"] == f"https://{CLOUD}/index.php?x=1"


def test_acme_challenge_is_served_over_http(edge: Edge) -> None:
    response = edge.http(CLOUD, "/.well-known/acme-challenge/token")
    assert response.status == 404  # from the webroot (absent here), not a redirect
    assert "Location" not in response.headers


def test_hsts_and_security_headers(edge: Edge, plan: Plan) -> None:
    response = edge.https(CLOUD)
    assert response.headers["Strict-Transport-Security"] == (
        f"max-age={plan.config.edge.hsts_seconds}; includeSubDomains"
    )
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert response.headers["Referrer-Policy"] == "same-origin"


@pytest.mark.parametrize("service", ["caldav", "carddav"])
def test_nextcloud_well_known_dav_redirects(edge: Edge, service: str) -> None:
    response = edge.https(CLOUD, f"/.well-known/{service}")
    assert response.status == 301
    assert response.headers["Location"] == f"https://{CLOUD}/remote.php/dav/"
    assert response.headers["Strict-Transport-Security"].startswith("max-age=")


def test_dav_redirect_only_on_nextcloud(edge: Edge) -> None:
    response = edge.https("git.example.com", "/.well-known/caldav")
    assert response.status == 200
    assert response.body.startswith("gitea GET /.well-known/caldav ")


def test_lan_only_routes_refuse_other_networks(edge: Edge, plan: Plan) -> None:
    for route in lan_routes(plan):
        response = edge.https(route.host)
        assert response.status == 403, (route.host, response.status, response.body)
        assert route.app not in response.body


def test_lan_only_routes_admit_the_lan(lan_edge: Edge, plan: Plan) -> None:
    for route in lan_routes(plan):
        response = lan_edge.https(route.host, "/login")
        assert response.status == 200, (route.host, response.status, response.body)
        assert response.body == f"{route.app} GET /login 0 https\n"


def test_unknown_server_name_is_refused_at_handshake(edge: Edge) -> None:
    error = edge.handshake_error("unknown.example.com")
    assert error is not None, "ssl_reject_handshake should refuse a name we do not serve"
    assert edge.handshake_error(CLOUD) is None


def test_unknown_host_header_gets_no_route(edge: Edge) -> None:
    response = edge.https("unknown.example.com", sni=CLOUD)
    assert response.status == 404
    assert "nextcloud" not in response.body


def test_20_mb_upload_reaches_nextcloud(edge: Edge) -> None:
    """NGINX's default client_max_body_size (1m) would answer 413; the route sets Nextcloud's limit."""
    size = 20 * 1024 * 1024
    response = edge.https(CLOUD, "/remote.php/dav/files/a", method="PUT", body=b"\0" * size)
    assert response.status == 200, response.body
    assert response.body == f"nextcloud PUT /remote.php/dav/files/a {size} https\n"


def test_health_endpoint(edge: Edge) -> None:
    response = http_plain(edge.extra["health_port"], "localhost", "/healthz")
    assert response.status == 200
    assert response.body == "ok\n"


def test_aliases_of_managed_headers_never_reach_the_backend(edge: Edge) -> None:
    """PHP (Nextcloud) reads X_Forwarded_For and X.Real.Ip as HTTP_X_FORWARDED_FOR / HTTP_X_REAL_IP:
    a client must not be able to smuggle those past the edge that sets the real ones."""
    response = edge.https(
        CLOUD, headers={"X_Forwarded_For": "6.6.6.6", "X.Real.Ip": "6.6.6.6", "X-Client_Role": "admin"}
    )
    assert response.status == 200
    seen = {name.lower() for name in response.headers["X-Backend-Saw"].split(",")}
    assert "x-forwarded-for" in seen
    assert not {name for name in seen if "_" in name or "." in name}, seen
