"""Two Pebbles, one playing Let's Encrypt staging and one production, for the staging-first tests of both
edges, each validating DNS-01 against the given DNS server (tests/certs/named.py), or - for a staging CA
that must fail - against its own pebble-challtestsrv, which holds no TXT record."""

from __future__ import annotations

import contextlib
import ssl
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509

from tests.contract.edge_support import free_port
from tests.contract.test_edge_nginx_certbot import pebble


@dataclass(frozen=True)
class Ca:
    directory: str
    api_cert: Path  # the certificate of Pebble's API (HTTPS)
    intermediate: x509.Name  # the CA certificates it issues name as their issuer
    log: Path
    account_folder: str  # certbot's accounts/<this>/: certbot talked to this CA

    def issued(self) -> int:
        """How many certificates this Pebble issued."""
        return self.log.read_text(errors="replace").count("Issued certificate serial")


@contextlib.contextmanager
def one(programs: dict[str, str], work: Path, dns: str | None) -> Iterator[Ca]:
    work.mkdir(parents=True)
    api, mgmt = free_port(), free_port()
    with pebble(programs, work, api, mgmt, free_port(), dns=dns):
        context = ssl.create_default_context(cafile=str(work / "pebble.pem"))
        url = f"https://127.0.0.1:{mgmt}/intermediates/0"
        with urllib.request.urlopen(url, context=context, timeout=5) as answer:
            intermediate = x509.load_pem_x509_certificate(answer.read()).subject
        directory, log = f"https://127.0.0.1:{api}/dir", work / "pebble.log"
        yield Ca(directory, work / "pebble.pem", intermediate, log, f"127.0.0.1:{api}")


@contextlib.contextmanager
def staging_and_production(
    require_program: Callable[[str], str], work: Path, dns: str, *, staging_fails: bool = False
) -> Iterator[tuple[Ca, Ca]]:
    programs = {name: require_program(name) for name in ("openssl", "pebble", "pebble-challtestsrv")}
    with (
        one(programs, work / "staging", None if staging_fails else dns) as staging,
        one(programs, work / "production", dns) as production,
    ):
        yield staging, production


def bundle(path: Path, *cas: Ca) -> Path:
    """One file trusting every Pebble's API certificate (certbot's REQUESTS_CA_BUNDLE)."""
    path.write_bytes(b"".join(ca.api_cert.read_bytes() for ca in cas))
    return path
