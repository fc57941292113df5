"""BIND's named from Debian on 127.0.0.1: authoritative for one zone, taking RFC 2136 updates signed with
a TSIG key, limited (update-policy) to TXT records inside the zone - what a user would set up for the
DNS-01 challenge. Used by the DNS-01 tests of both edges and the preflight's TXT round trip."""

from __future__ import annotations

import base64
import contextlib
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import dns.exception
import dns.resolver

from tests.conftest import write_secret
from tests.contract.edge_support import free_port, running

KEY_NAME = "homelab-acme"
ALGORITHM = "hmac-sha256"
START_SECONDS = 30.0


@dataclass(frozen=True)
class Named:
    port: int
    zone: str
    key_name: str
    secret: str  # base64
    secret_file: Path  # 0600
    log: Path

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"


def tsig_secret() -> str:
    return base64.b64encode(secrets.token_bytes(32)).decode()


@contextlib.contextmanager
def named(
    program: str,
    folder: Path,
    zone: str = "example.com",
    addresses: dict[str, str] | None = None,
    records: tuple[str, ...] = (),
) -> Iterator[Named]:
    """named for `zone` on a free 127.0.0.1 port (UDP and TCP); `addresses` are A records (relative
    names, "@" for the apex), by default the apex and every name under it at 127.0.0.1; `records` are
    more zone-file lines."""
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    secret = tsig_secret()
    secret_file = write_secret(folder / "tsig-secret", secret)
    default = {"@": "127.0.0.1", "*": "127.0.0.1"}
    zone_text = [
        "$TTL 60",
        f"@ IN SOA ns.{zone}. hostmaster.{zone}. 1 60 60 600 60",
        f"@ IN NS ns.{zone}.",
        "ns IN A 127.0.0.1",
        *[f"{name} IN A {address}" for name, address in (addresses or default).items()],
        *records,
    ]
    (folder / f"{zone}.zone").write_text("\n".join(zone_text) + "\n")
    (folder / "named.conf").write_text(
        f"""options {{
    directory "{folder}";
    pid-file none;
    session-keyfile "{folder}/session.key";
    managed-keys-directory "{folder}";
    listen-on port {port} {{ 127.0.0.1; }};
    listen-on-v6 {{ none; }};
    recursion no;
    dnssec-validation no;
}};
key "{KEY_NAME}" {{ algorithm {ALGORITHM}; secret "{secret}"; }};
zone "{zone}" {{
    type primary;
    file "{folder}/{zone}.zone";
    update-policy {{ grant {KEY_NAME} zonesub TXT; }};
}};
"""
    )
    log = folder / "named.log"
    argv = [program, "-g", "-4", "-c", str(folder / "named.conf")]
    with running(argv, log, folder) as process:
        resolver = dns.resolver.Resolver(configure=False)
        resolver.nameservers, resolver.port, resolver.lifetime = ["127.0.0.1"], port, 1.0
        deadline = time.monotonic() + START_SECONDS
        while True:
            try:
                resolver.resolve(zone, "SOA")
                break
            except dns.exception.DNSException:
                assert process.poll() is None, log.read_text()
                assert time.monotonic() < deadline, f"named did not answer within {START_SECONDS} s\n{log.read_text()}"
                time.sleep(0.05)
        yield Named(port, zone, KEY_NAME, secret, secret_file, log)
