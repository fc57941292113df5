"""`homelab certs check` on the DNS-01 challenge (wildcard) against a real BIND named (tests/certs/named.py):
the TXT round trip with the configured TSIG key passes and leaves nothing behind; a wrong secret and an
unknown key name each fail with what to change; CAA is checked for the certificate's names."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import dns.resolver
import pytest

from homelab.certs import preflight
from tests.certs.conftest import dns01_config, run_check
from tests.certs.named import Named, named, tsig_secret

pytestmark = pytest.mark.real


@pytest.fixture
def server(tmp_path: Path, require_program: Callable[[str], str]) -> Iterator[Named]:
    caa = '@ IN CAA 0 issue "letsencrypt.org"'
    with named(require_program("named"), tmp_path / "named", records=(caa,)) as running:
        yield running


def _check(tmp_path: Path, server: Named, secret: str, **rfc2136: str) -> str:
    config = dns01_config(tmp_path / "config", server.port, secret)
    if rfc2136:
        text = config.read_text()
        for key, value in rfc2136.items():
            text = text.replace(f"{key}: homelab-acme", f"{key}: {value}")
        config.write_text(text)
    result = run_check(config, server.port, "127.0.0.1")
    return result.stdout


def test_dns_credentials_round_trip(tmp_path: Path, server: Named) -> None:
    out = _check(tmp_path, server, server.secret)
    assert (
        f"ok    DNS credentials: TXT _homelab-preflight.example.com. added, read back and deleted at "
        f"127.0.0.1:{server.port} with key homelab-acme"
    ) in out, out
    assert "ok    plex.example.com address: resolves to 127.0.0.1" in out
    # a wildcard certificate: the CA checks CAA for its two names (the wildcard's from its base name)
    assert "ok    example.com CAA: CAA at example.com allows letsencrypt.org" in out
    assert "ok    *.example.com CAA: CAA at example.com allows letsencrypt.org" in out
    assert "plex.example.com CAA" not in out
    assert server.secret not in out
    resolver = preflight.Probe(nameserver="127.0.0.1", dns_port=server.port, timeout=2).resolver()
    with pytest.raises(dns.resolver.NoAnswer):  # deleted again (the zone's `*` A record still matches)
        resolver.resolve("_homelab-preflight.example.com", "TXT")


def test_bad_dns_credentials(tmp_path: Path, server: Named) -> None:
    wrong = tsig_secret()
    out = _check(tmp_path / "secret", server, wrong)
    assert f"fail  DNS credentials: 127.0.0.1:{server.port} rejected key 'homelab-acme' (" in out, out
    assert "the key name, secret (" in out and "/secrets/tsig) and algorithm (hmac-sha256) must match" in out
    assert wrong not in out

    out = _check(tmp_path / "name", server, server.secret, tsig_key="someone-else")
    assert f"fail  DNS credentials: 127.0.0.1:{server.port} rejected key 'someone-else' (" in out, out


def test_bad_dns_credentials_exit_code(tmp_path: Path, server: Named) -> None:
    config = dns01_config(tmp_path / "config", server.port, tsig_secret())
    assert run_check(config, server.port, "127.0.0.1").exit_code == 1
