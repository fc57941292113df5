"""What every edge kind must do, whichever program serves it: a test module subclasses EdgeContract and
provides the module fixtures `plan` (the example for that kind), `edge` (it running on loopback) and
`lan_edge` (the same with 127.0.0.1 in edge.lan_cidrs, so the test client counts as LAN).

What differs between the kinds (the redirect's status and port, health checks, the certificate life
cycle) stays in each kind's own test module.
"""

from __future__ import annotations

import socket

import pytest

from homelab.plan_model import Plan, Route
from tests.contract.edge_support import Edge, client_context

CLOUD = "cloud.example.com"
WEBSOCKET_HOST = "rstudio.example.com"  # a public route with websockets on


def websocket_echo(edge: Edge, host: str, message: bytes) -> tuple[int, bytes]:
    """A websocket handshake over HTTP/1.1 through the edge, then `message`: (status, what came back)."""
    handshake = (
        f"GET /socket HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    with (
        socket.create_connection(("127.0.0.1", edge.https_port), timeout=10) as raw,
        client_context(edge.ca_file).wrap_socket(raw, server_hostname=host) as tls,
    ):
        tls.sendall(handshake.encode())
        received = b""
        while b"\r\n\r\n" not in received and (chunk := tls.recv(65536)):
            received += chunk
        head, _, echoed = received.partition(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        if status == 101:
            tls.sendall(message)
            while not echoed.endswith(message) and (chunk := tls.recv(65536)):
                echoed += chunk
        return status, echoed


def public_routes(plan: Plan) -> list[Route]:
    return [r for r in plan.routes if not r.lan_only]


def lan_routes(plan: Plan) -> list[Route]:
    routes = [r for r in plan.routes if r.lan_only]
    assert {r.host for r in routes} >= {"ci.example.com", "grafana.example.com"}
    return routes


class EdgeContract:
    def test_each_host_reaches_its_own_backend_over_https(self, edge: Edge, plan: Plan) -> None:
        for route in public_routes(plan):
            response = edge.https(route.host, "/some/path?q=1")
            assert response.status == 200, (route.host, response.status, response.body)
            assert response.body == f"{route.app} GET /some/path?q=1 0 https\n"

    def test_hsts_and_security_headers(self, edge: Edge, plan: Plan) -> None:
        response = edge.https(CLOUD)
        assert response.headers["Strict-Transport-Security"] == (
            f"max-age={plan.config.edge.hsts_seconds}; includeSubDomains"
        )
        assert response.headers["X-Content-Type-Options"] == "nosniff"
        assert response.headers["Referrer-Policy"] == "same-origin"

    @pytest.mark.parametrize("service", ["caldav", "carddav"])
    def test_nextcloud_well_known_dav_redirects(self, edge: Edge, service: str) -> None:
        response = edge.https(CLOUD, f"/.well-known/{service}")
        assert response.status == 301
        assert response.headers["Location"] == f"https://{CLOUD}/remote.php/dav/"
        assert response.headers["Strict-Transport-Security"].startswith("max-age=")

    def test_dav_redirect_only_on_nextcloud(self, edge: Edge) -> None:
        response = edge.https("git.example.com", "/.well-known/caldav")
        assert response.status == 200
        assert response.body.startswith("gitea GET /.well-known/caldav ")

    def test_lan_only_routes_refuse_other_networks(self, edge: Edge, plan: Plan) -> None:
        for route in lan_routes(plan):
            response = edge.https(route.host)
            assert response.status == 403, (route.host, response.status, response.body)
            assert route.app not in response.body

    def test_lan_only_routes_admit_the_lan(self, lan_edge: Edge, plan: Plan) -> None:
        for route in lan_routes(plan):
            response = lan_edge.https(route.host, "/login")
            assert response.status == 200, (route.host, response.status, response.body)
            assert response.body == f"{route.app} GET /login 0 https\n"

    def test_unknown_server_name_is_refused_at_handshake(self, edge: Edge) -> None:
        error = edge.handshake_error("unknown.example.com")
        assert error is not None, "a name the edge does not serve must fail the TLS handshake"
        assert edge.handshake_error(CLOUD) is None

    def test_unknown_host_header_gets_no_route(self, edge: Edge) -> None:
        response = edge.https("unknown.example.com", sni=CLOUD)
        assert response.status == 404
        assert "nextcloud" not in response.body

    def test_websocket_upgrade_reaches_the_app(self, edge: Edge, plan: Plan) -> None:
        route = next(r for r in plan.routes if r.host == WEBSOCKET_HOST)
        assert route.websocket and not route.lan_only
        status, echoed = websocket_echo(edge, WEBSOCKET_HOST, b"hello over the edge")
        assert status == 101
        assert echoed == f"{route.app}:hello over the edge".encode()

    def test_20_mb_upload_reaches_nextcloud(self, edge: Edge) -> None:
        """NGINX's default client_max_body_size (1m) would answer 413; the route sets Nextcloud's limit."""
        size = 20 * 1024 * 1024
        response = edge.https(CLOUD, "/remote.php/dav/files/a", method="PUT", body=b"\0" * size)
        assert response.status == 200, response.body
        assert response.body == f"nextcloud PUT /remote.php/dav/files/a {size} https\n"

    def test_aliases_of_managed_headers_never_reach_the_backend(self, edge: Edge) -> None:
        """PHP (Nextcloud) reads X_Forwarded_For and X.Real.Ip as HTTP_X_FORWARDED_FOR / HTTP_X_REAL_IP:
        a client must not be able to smuggle those past the edge that sets the real ones."""
        response = edge.https(
            CLOUD, headers={"X_Forwarded_For": "6.6.6.6", "X.Real.Ip": "6.6.6.6", "X-Client_Role": "admin"}
        )
        assert response.status == 200
        seen = {name.lower() for name in response.headers["X-Backend-Saw"].split(",")}
        assert "x-forwarded-for" in seen
        assert not {name for name in seen if "_" in name or "." in name}, seen
