"""Contract: the rendered Traefik static + dynamic config and the rendered router labels, run by the
real traefik on loopback, route, redirect, add headers and allow-list exactly as intended.

Changed for the test, and nothing else: entry point addresses (free 127.0.0.1 ports), the ACME storage
path and CA (a closed local port: no traffic leaves the machine), the docker provider (replaced by a
file provider holding the rendered dynamic.yml, the rendered labels translated to routers/services
pointing at local backends, and test certificates as tls.certificates).
"""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from homelab.plan_model import Plan
from tests.contract.edge_contract import CLOUD, EdgeContract
from tests.contract.edge_support import (
    Edge,
    LocalCA,
    example_plan,
    labels_to_dynamic,
    program,
    traefik_edge,
)

pytestmark = pytest.mark.real


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


class TestEdgeContract(EdgeContract):
    """Routing, headers, LAN allow-list, SNI and upload limits, as every edge kind must (Traefik here)."""


def test_http_redirects_to_https(edge: Edge) -> None:
    response = edge.http(CLOUD, "/index.php?x=1")
    assert response.status in (301, 308)
    # the test's websecure entry point is not on 443, so Traefik names its port
    assert response.headers["Location"] == f"https://{CLOUD}:{edge.https_port}/index.php?x=1"


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


def test_gitea_ssh_port_is_forwarded_by_the_tcp_entry_point(edge: Edge) -> None:
    """The rendered `gitea-ssh` entry point and TCP router labels carry raw bytes to Gitea's SSH port."""
    with socket.create_connection(("127.0.0.1", edge.extra["ports"]["gitea-ssh"]), timeout=10) as conn:
        conn.sendall(b"SSH-2.0-test\r\n")
        assert conn.recv(1024) == b"gitea-ssh:SSH-2.0-test\r\n"
