"""`homelab certs check` on the DNS-01 challenge against a real BIND named (tests/certs/named.py) whose TSIG
key may write only TXT records at `_acme-challenge` names, one update-policy rule a name: the round trip
goes to exactly the names the edge will write, in the zone an SOA walk finds, and each failure says what is
wrong and what to change - the policy line for a refused name, never `zonesub`."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import dns.message
import dns.query
import dns.rdatatype
import pytest
from typer.testing import Result

from tests.certs.conftest import dns01_config, run_check
from tests.certs.named import KEY_NAME, Named, named, tsig_secret
from tests.conftest import find_program, missing

pytestmark = pytest.mark.real
# the CAA walk stops here: an authoritative-only server refuses to answer for `com`
CAA = '@ IN CAA 0 issue "letsencrypt.org"'
APPS = ("plex", "cloud", "git", "ci", "rstudio", "grafana")


@pytest.fixture(scope="module")
def program() -> str:
    path = find_program("named")
    if path is None:
        missing("program 'named'")
    assert path is not None
    return path


@pytest.fixture(scope="module")
def server(program: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Named]:
    with named(program, tmp_path_factory.mktemp("named"), records=(CAA,)) as running:
        yield running


def _check(folder: Path, server: Named, secret: str | None = None, **options: object) -> Result:
    rfc2136 = options.pop("rfc2136", None)
    config = dns01_config(folder, server.port, secret or server.secret, rfc2136=rfc2136, **options)  # type: ignore[arg-type]
    return run_check(config, server.port, "127.0.0.1")


def _challenge_records(server: Named, name: str) -> list[str]:
    answer = dns.query.tcp(dns.message.make_query(name, "TXT"), "127.0.0.1", port=server.port, timeout=2)
    return [r.to_text() for rrset in answer.answer if rrset.rdtype == dns.rdatatype.TXT for r in rrset]


def test_least_privilege_key_passes_for_every_name_the_edge_writes(tmp_path: Path, server: Named) -> None:
    at = f"127.0.0.1:{server.port}"
    result = _check(tmp_path / "wildcard", server)
    out = result.stdout
    assert result.exit_code == 0, out
    # a wildcard certificate and its domain: one TXT name
    assert (
        f"ok    _acme-challenge.example.com: TXT added, read back and deleted in zone example.com at {at} "
        "with key homelab-acme"
    ) in out, out
    assert out.count("_acme-challenge.") == 1
    assert "ok    *.example.com CAA: CAA at example.com allows letsencrypt.org" in out
    assert server.secret not in out
    assert _challenge_records(server, "_acme-challenge.example.com") == []

    result = _check(tmp_path / "per-name", server, wildcard=False)
    assert result.exit_code == 0, result.stdout
    for app in APPS:
        assert f"ok    _acme-challenge.{app}.example.com: TXT added, read back and deleted in zone example.com" in (
            result.stdout
        )
        assert _challenge_records(server, f"_acme-challenge.{app}.example.com") == []


def test_domain_one_label_below_the_zone_apex(tmp_path: Path, server: Named) -> None:
    result = _check(tmp_path, server, domain="home.example.com")
    assert result.exit_code == 0, result.stdout
    assert "ok    _acme-challenge.home.example.com: TXT added, read back and deleted in zone example.com at" in (
        result.stdout
    )


def test_a_policy_refusing_one_name_names_it_and_the_rule_that_allows_it(tmp_path: Path, program: str) -> None:
    allowed = tuple(f"_acme-challenge.{app}.example.com" for app in APPS if app != "git")
    with named(program, tmp_path / "named", records=(CAA,), grants=allowed) as server:
        result = _check(tmp_path / "config", server, wildcard=False)
    out = result.stdout
    assert result.exit_code == 1, out
    assert (
        f"fail  _acme-challenge.git.example.com: 127.0.0.1:{server.port} answered REFUSED to adding TXT "
        "_acme-challenge.git.example.com in zone example.com: key homelab-acme may not update this name; allow "
        "exactly it in the zone's update-policy: `grant homelab-acme name _acme-challenge.git.example.com. TXT;`"
    ) in out, out
    assert "ok    _acme-challenge.cloud.example.com: TXT added" in out
    assert "zonesub" not in out
    assert out.rstrip().endswith("1 failed")


def test_wrong_secret_unknown_key_wrong_algorithm(tmp_path: Path, server: Named) -> None:
    at = f"127.0.0.1:{server.port}"
    wrong = tsig_secret()
    result = _check(tmp_path / "secret", server, wrong)
    assert result.exit_code == 1
    assert (
        f"fail  _acme-challenge.example.com: {at} does not verify the signature of key 'homelab-acme' (BADSIG): "
        "the secret in "
    ) in result.stdout, result.stdout
    assert "/secrets/tsig is not the server's secret for it" in result.stdout
    assert wrong not in result.stdout

    result = _check(tmp_path / "key", server, rfc2136={"tsig_key": "someone-else"})
    assert result.exit_code == 1
    assert (
        f"fail  _acme-challenge.example.com: {at} knows no key 'someone-else' with algorithm hmac-sha256 (BADKEY): "
        "domain.acme.rfc2136.tsig_key and tsig_algorithm must match the server's `key` statement"
    ) in result.stdout, result.stdout

    result = _check(tmp_path / "algorithm", server, rfc2136={"tsig_algorithm": "hmac-sha512"})
    assert result.exit_code == 1
    assert (
        f"fail  _acme-challenge.example.com: {at} knows no key '{KEY_NAME}' with algorithm hmac-sha512 (BADKEY)"
    ) in result.stdout, result.stdout


def test_name_outside_the_servers_zones(tmp_path: Path, server: Named) -> None:
    result = _check(tmp_path, server, domain="example.org")
    assert result.exit_code == 1
    assert (
        f"fail  _acme-challenge.example.org: 127.0.0.1:{server.port} answered REFUSED for SOA "
        "_acme-challenge.example.org: it serves no zone holding _acme-challenge.example.org; point "
        "domain.acme.rfc2136.server at the primary of the zone holding it"
    ) in result.stdout, result.stdout


@contextlib.contextmanager
def _silent_server() -> Iterator[int]:
    """A TCP port that takes connections and never answers: a hung or firewalled server."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        yield listener.getsockname()[1]


@pytest.mark.parametrize("down", ["closed", "silent"])
def test_server_down_is_reported_once_within_3_seconds(tmp_path: Path, server: Named, down: str) -> None:
    with contextlib.ExitStack() as stack:
        if down == "silent":
            port = stack.enter_context(_silent_server())
        else:
            with socket.socket() as probe:  # a port nothing listens on
                probe.bind(("127.0.0.1", 0))
                port = probe.getsockname()[1]
        started = time.monotonic()
        result = _check(tmp_path, server, wildcard=False, rfc2136={"port": port})
        took = time.monotonic() - started
    reason = "Connection refused" if down == "closed" else "timed out"
    assert result.exit_code == 1
    assert f"fail  DNS credentials: 127.0.0.1:{port} does not answer ({reason}, " in result.stdout, result.stdout
    assert "_acme-challenge" not in result.stdout  # one finding, not one a name
    assert took < 3.0 + 1.0  # the check's budget, and the other checks against the running server


def test_clock_skew(tmp_path: Path, server: Named, monkeypatch: pytest.MonkeyPatch) -> None:
    real = time.time

    class Skewed:
        @staticmethod
        def time() -> float:
            return real() + 3600  # an hour ahead: BIND allows 300 s

    monkeypatch.setattr(dns.message, "time", Skewed)
    result = _check(tmp_path, server)
    assert result.exit_code == 1
    assert (
        f"fail  _acme-challenge.example.com: 127.0.0.1:{server.port} rejected the signature's time (BADTIME): this "
        "box's clock or the server's is off"
    ) in result.stdout, result.stdout


@pytest.mark.parametrize("edge", ["traefik", "nginx"])
def test_a_challenge_delegated_by_cname(tmp_path: Path, program: str, edge: str) -> None:
    """A CNAME at the challenge name (its records kept in another zone): lego writes at the target,
    certbot's plugin at the name itself, where BIND ignores a TXT beside the CNAME."""
    cname = "_acme-challenge IN CNAME delegated.example.net."
    folder = tmp_path / "named"
    grants = ("delegated.example.net",)
    with named(program, folder, records=(CAA, cname), more_zones=("example.net",), grants=grants) as server:
        result = _check(tmp_path / "config", server, edge=edge)
    if edge == "traefik":
        assert result.exit_code == 0, result.stdout
        assert (
            "ok    _acme-challenge.example.com: TXT added at delegated.example.net (its CNAME's target), read back "
            f"and deleted in zone example.net at 127.0.0.1:{server.port} with key homelab-acme"
        ) in result.stdout, result.stdout
    else:
        assert result.exit_code == 1
        assert (
            "fail  _acme-challenge.example.com: _acme-challenge.example.com is a CNAME to delegated.example.net: "
            "certbot (the NGINX edge) writes the TXT record at _acme-challenge.example.com itself, where a CNAME "
            "leaves no room for it; remove the CNAME"
        ) in result.stdout, result.stdout
