"""Contract: the rendered Traefik static + dynamic config and the rendered router labels, run by the
real traefik on loopback, route, redirect, add headers and allow-list exactly as intended.

Changed for the test, and nothing else: entry point addresses (free 127.0.0.1 ports), the ACME storage
path and CA (a closed local port: no traffic leaves the machine), the docker provider (replaced by a
file provider holding the rendered dynamic.yml, the rendered labels translated to routers/services
pointing at local backends, and test certificates as tls.certificates).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from homelab.plan import Plan, Route
from tests.contract.edge_support import (
    Edge,
    LocalCA,
    example_plan,
    labels_to_dynamic,
    program,
    traefik_edge,
)

pytestmark = pytest.mark.real

CLOUD = "cloud.example.com"


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("traefik")


@pytest.fixture(scope="module")
def pki(folder: Path) -> LocalCA:
    return LocalCA(folder / "pki")


@pytest.fixture(scope="module")
def plan(folder: Path) -> Plan:
    return example_plan(folder / "example")


@pytest.fixture(scope="module")
def edge(plan: Plan, folder: Path, pki: LocalCA) -> Iterator[Edge]:
    with traefik_edge(plan, folder / "run", pki) as running_edge:
        yield running_edge


@pytest.fixture(scope="module")
def lan_edge(folder: Path, pki: LocalCA) -> Iterator[Edge]:
    """The example with 127.0.0.1 in edge.lan_cidrs: the test client counts as LAN."""
    plan = example_plan(folder / "example-lan", lan_cidrs=["192.168.1.0/24", "127.0.0.1/32"])
    with traefik_edge(plan, folder / "run-lan", pki) as running_edge:
        yield running_edge


def public_routes(plan: Plan) -> list[Route]:
    return [r for r in plan.routes if not r.lan_only]


def lan_routes(plan: Plan) -> list[Route]:
    routes = [r for r in plan.routes if r.lan_only]
    assert {r.host for r in routes} >= {"ci.example.com", "grafana.example.com"}
    return routes


def test_each_host_reaches_its_own_backend_over_https(edge: Edge, plan: Plan) -> None:
    for route in public_routes(plan):
        response = edge.https(route.host, "/some/path?q=1")
        assert response.status == 200, (route.host, response.status, response.body)
        assert response.body == f"{route.app} GET /some/path?q=1 0 https\n"


def test_http_redirects_to_https(edge: Edge) -> None:
    response = edge.http(CLOUD, "/index.php?x=1")
    assert response.status in (301, 308)
    # the test's websecure entry point is not on 443, so Traefik names its port
    assert response.headers["Location"] == f"https://{CLOUD}:{edge.https_port}/index.php?x=1"


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
    assert error is not None, "sniStrict should refuse a name without a certificate"
    assert edge.handshake_error(CLOUD) is None


def test_unknown_host_header_gets_no_route(edge: Edge) -> None:
    response = edge.https("unknown.example.com", sni=CLOUD)
    assert response.status == 404


def test_large_upload_reaches_nextcloud(edge: Edge) -> None:
    size = 20 * 1024 * 1024
    response = edge.https(CLOUD, "/remote.php/dav/files/a", method="PUT", body=b"\0" * size)
    assert response.status == 200
    assert response.body == f"nextcloud PUT /remote.php/dav/files/a {size} https\n"


def test_healthcheck_ping_exits_zero(edge: Edge) -> None:
    """The compose healthcheck runs `traefik healthcheck --ping` with the config in a default location;
    from the folder holding traefik.yml the very same command finds it the same way."""
    config_file: Path = edge.extra["config_file"]
    result = subprocess.run(
        [program("traefik"), "healthcheck", "--ping"],
        cwd=config_file.parent,
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"127.0.0.1:{edge.extra['ports']['ping']}/ping" in result.stdout


def test_label_converter_refuses_labels_it_does_not_know() -> None:
    with pytest.raises(AssertionError, match="not understood"):
        labels_to_dynamic({"traefik.http.routers.a.priority": "5"}, {})
    routes = labels_to_dynamic(
        {
            "traefik.enable": "true",
            "traefik.http.routers.a.rule": "Host(`a.example.com`)",
            "traefik.http.routers.a.entrypoints": "websecure",
            "traefik.http.routers.a.tls.certresolver": "le",
            "traefik.http.routers.a.middlewares": "x@file,y@file",
            "traefik.http.services.a.loadbalancer.server.port": "80",
        },
        {"a": "http://127.0.0.1:1"},
    )
    assert routes == {
        "http": {
            "routers": {
                "a": {
                    "rule": "Host(`a.example.com`)",
                    "entryPoints": ["websecure"],
                    "tls": {"certResolver": "le"},
                    "middlewares": ["x@file", "y@file"],
                }
            },
            "services": {"a": {"loadBalancer": {"servers": [{"url": "http://127.0.0.1:1"}]}}},
        }
    }


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


def test_gitea_ssh_port_is_forwarded_by_the_tcp_entry_point(edge: Edge) -> None:
    """The rendered `gitea-ssh` entry point and TCP router labels carry raw bytes to Gitea's SSH port."""
    import socket

    with socket.create_connection(("127.0.0.1", edge.extra["ports"]["gitea-ssh"]), timeout=10) as conn:
        conn.sendall(b"SSH-2.0-test\r\n")
        assert conn.recv(1024) == b"gitea-ssh:SSH-2.0-test\r\n"
