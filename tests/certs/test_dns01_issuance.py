"""Both edges, exactly as rendered (tests/certs/edges_native.py), get a certificate through a real BIND
named whose key may write only `_acme-challenge` TXT records, from a Pebble that validates DNS-01 by asking
that named (`pebble -dnsserver`): a wildcard and its domain at a zone's apex, a domain one label below its
zone's apex, and a domain in a second zone. The ACME directory's HTTPS is trusted through acme.ca_bundle
(Pebble's API certificate), as a private CA would be. Times are asserted loosely: a bare certbot takes
3-5 s here; the edges as rendered before took 85 s (Traefik: system resolver, 60 s between the two TXT
values) and 35 s and more (certbot: a fixed 30 s wait)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.certs.conftest import dns01_config
from tests.certs.edges_native import Issuance, certbot_issues, traefik_issues
from tests.certs.named import Named, named
from tests.certs.pebbles import Ca, one
from tests.conftest import find_program, missing

pytestmark = pytest.mark.real
LIMIT_SECONDS = 25.0  # generous for a loaded 2-core box; the old rendering needed 35-85 s


def _program(name: str) -> str:
    path = find_program(name)
    if path is None:
        missing(f"program {name!r}")
    assert path is not None
    return path


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Named]:
    with named(_program("named"), tmp_path_factory.mktemp("named"), more_zones=("example.net",)) as running:
        yield running


@pytest.fixture(scope="module")
def ca(server: Named, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ca]:
    programs = {name: _program(name) for name in ("openssl", "pebble", "pebble-challtestsrv")}
    with one(programs, tmp_path_factory.mktemp("pebble") / "ca", server.address) as pebble:
        yield pebble


CASES = {
    "apex": ("example.com", frozenset({"example.com", "*.example.com"})),
    "below-apex": ("home.example.com", frozenset({"home.example.com", "*.home.example.com"})),
    "second-zone": ("example.net", frozenset({"example.net", "*.example.net"})),
}
EDGES: dict[str, Callable[[Path, str, Path, float], Issuance]] = {"traefik": traefik_issues, "nginx": certbot_issues}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("edge", list(EDGES))
def test_wildcard_issued_through_rfc2136_as_rendered(
    tmp_path: Path, server: Named, ca: Ca, edge: str, case: str
) -> None:
    domain, names = CASES[case]
    config = dns01_config(
        tmp_path / "config", server.port, server.secret, edge=edge, domain=domain, ca_server=ca.directory,
        ca_bundle=ca.api_cert,
    )  # fmt: skip
    program = _program("traefik" if edge == "traefik" else "certbot")
    issued_before = ca.issued()
    issuance = EDGES[edge](config, program, tmp_path / "edge", LIMIT_SECONDS)
    assert issuance.names == names
    assert ca.issued() == issued_before + 1
    assert issuance.seconds < LIMIT_SECONDS
    assert server.secret not in issuance.log.read_text(errors="replace")
