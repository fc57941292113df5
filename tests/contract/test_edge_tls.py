"""Contract: both edges, run from their rendered configs on loopback, pass sslyze's Mozilla
*intermediate* check; the only finding left is that sslyze does not trust our test CA.

A control runs Traefik without the rendered TLS options (its stock defaults): the same scan must find
violations there, so a pass above means the rendered options did it, not a lenient scanner.
The certificates are what the edges get from Let's Encrypt with keyType EC256 / certbot --key-type
ecdsa: ECDSA P-256 signed with SHA-256, 90 days (Mozilla's maximum lifespan is 366 days).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

from tests.contract.edge_support import LocalCA, example_plan, nginx_edge, program, traefik_edge

pytestmark = [pytest.mark.real, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

SNI = "cloud.example.com"
TRUST_ONLY = {"certificate_path_validation"}


def scan(ports: dict[str, int], controls: dict[str, int]) -> dict[str, Any]:
    """Scan every edge concurrently with sslyze. For `ports`: {edge: {issue: message}} against Mozilla
    intermediate. For `controls` (cheaper): {edge: (TLS 1.2 suites accepted, curves accepted)}."""
    program("sslyze")  # the package's CLI ships with the API used here; fail in CI without it
    from sslyze import ScanCommand, Scanner, ServerNetworkLocation, ServerScanRequest, ServerScanStatusEnum
    from sslyze.mozilla_tls_profile.tls_config_checker import (
        SCAN_COMMANDS_NEEDED_BY_MOZILLA_CHECKER,
        MozillaTlsConfiguration,
        ServerNotCompliantWithTlsConfiguration,
        TlsConfigurationEnum,
        check_server_against_tls_configuration,
    )

    control_commands = {ScanCommand.TLS_1_2_CIPHER_SUITES, ScanCommand.ELLIPTIC_CURVES}
    names = {port: name for name, port in {**ports, **controls}.items()}
    scanner = Scanner()
    scanner.queue_scans(
        [
            ServerScanRequest(
                server_location=ServerNetworkLocation(SNI, port, ip_address="127.0.0.1"),
                scan_commands=control_commands if name in controls else SCAN_COMMANDS_NEEDED_BY_MOZILLA_CHECKER,
            )
            for name, port in {**ports, **controls}.items()
        ]
    )
    intermediate = MozillaTlsConfiguration.get(TlsConfigurationEnum.MOZILLA_INTERMEDIATE)
    findings: dict[str, Any] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # sslyze's bundled trust stores hold legacy certificates
        for result in scanner.get_results():
            name = names[result.server_location.port]
            assert result.scan_status == ServerScanStatusEnum.COMPLETED, (
                name,
                result.connectivity_error_trace,
            )
            if name in controls:
                assert result.scan_result is not None, name
                suites = result.scan_result.tls_1_2_cipher_suites.result
                curves = result.scan_result.elliptic_curves.result
                assert suites is not None and curves is not None, name
                findings[name] = (
                    {accepted.cipher_suite.name for accepted in suites.accepted_cipher_suites},
                    {curve.name for curve in curves.supported_curves or []},
                )
                continue
            try:
                check_server_against_tls_configuration(result, intermediate)
                findings[name] = {}
            except ServerNotCompliantWithTlsConfiguration as exc:
                findings[name] = dict(exc.issues)
    return findings


@pytest.fixture(scope="module")
def findings(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    folder = tmp_path_factory.mktemp("tls")
    pki = LocalCA(folder / "pki")
    traefik_plan = example_plan(folder / "example-traefik")
    nginx_plan = example_plan(folder / "example-nginx", kind="nginx")

    def stock_tls(dynamic: dict[str, Any]) -> None:
        del dynamic["tls"]

    with contextlib.ExitStack() as stack:
        edges = {
            "traefik": stack.enter_context(traefik_edge(traefik_plan, folder / "traefik", pki)),
            "nginx": stack.enter_context(nginx_edge(nginx_plan, folder / "nginx", pki)),
            "traefik-stock": stack.enter_context(
                traefik_edge(traefik_plan, folder / "traefik-stock", pki, tweak_dynamic=stock_tls)
            ),
        }
        control = edges.pop("traefik-stock")
        yield scan({name: edge.https_port for name, edge in edges.items()}, {"traefik-stock": control.https_port})


@pytest.mark.parametrize("edge", ["traefik", "nginx"])
def test_rendered_edge_meets_mozilla_intermediate(findings: dict[str, Any], edge: str) -> None:
    issues = findings[edge]
    assert set(issues) - TRUST_ONLY == set(), issues
    # the certificate checks did run: our test CA is (rightly) unknown to sslyze's trust stores
    assert set(issues) == TRUST_ONLY


def test_traefik_stock_tls_fails_intermediate(findings: dict[str, Any]) -> None:
    """Without the rendered tls.options Traefik accepts CBC-SHA suites and secp521r1 (reference.md):
    the scan sees the difference the rendered options make."""
    from sslyze.mozilla_tls_profile.tls_config_checker import MozillaTlsConfiguration, TlsConfigurationEnum

    intermediate = MozillaTlsConfiguration.get(TlsConfigurationEnum.MOZILLA_INTERMEDIATE)
    suites, curves = findings["traefik-stock"]
    assert {s for s in suites - intermediate.ciphers.iana if "_CBC_" in s}, suites
    assert "secp521r1" in curves - intermediate.tls_curves, curves


def test_scan_used_the_test_server_name(findings: dict[str, Any]) -> None:
    assert f"CN={SNI}" in findings["nginx"]["certificate_path_validation"]
    assert f"CN={SNI}" in findings["traefik"]["certificate_path_validation"]
