"""BIND's named from Debian on 127.0.0.1: authoritative for a zone (or a few), taking RFC 2136 updates signed
with a TSIG key that may write only TXT records at `_acme-challenge` names (update-policy `name` rules, one
a name: BIND has no "any _acme-challenge name") - the least privilege a careful admin gives an ACME client.
Used by the DNS-01 tests of both edges and by `homelab certs check`'s tests."""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import secrets
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import dns.exception
import dns.resolver

from tests.conftest import write_secret
from tests.contract.edge_support import free_port, running

KEY_NAME = "homelab-acme"
# the example's apps, and `home` for a domain one label below the zone's apex
HOSTS = ("", "plex", "cloud", "git", "ci", "rstudio", "grafana", "home")
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
    process: subprocess.Popen[bytes] = field(compare=False, repr=False)  # to stop it for an outage

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
    *,
    more_zones: tuple[str, ...] = (),
    grants: tuple[str, ...] | None = None,
    algorithm: str = ALGORITHM,
) -> Iterator[Named]:
    """named for `zone` (and `more_zones`, alike) on a free 127.0.0.1 port (UDP and TCP); `addresses` are
    A records (relative names, "@" for the apex), by default the apex and every name under it at
    127.0.0.1; `records` are more zone-file lines. The key may write TXT at `grants` (absolute names), by
    default at `_acme-challenge.<host>.<zone>` for every HOSTS entry of every zone."""
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
    zones = (zone, *more_zones)
    if grants is None:
        grants = tuple(f"_acme-challenge.{h}.{z}".replace("..", ".") for z in zones for h in HOSTS)
    for each in zones:
        text = "\n".join(zone_text) + "\n"
        (folder / f"{each}.zone").write_text(text.replace(f"{zone}.", f"{each}."))
    zone_blocks = ""
    for each in zones:
        # an update-policy needs a rule: a zone none of `grants` is in gets one that matches nothing
        rules = [f"grant {KEY_NAME} name {g}. TXT;" for g in grants if g == each or g.endswith(f".{each}")]
        policy = " ".join(rules) or f"deny {KEY_NAME} name nothing.{each}. ANY;"
        zone_blocks += (
            f'zone "{each}" {{ type primary; file "{folder}/{each}.zone"; update-policy {{ {policy} }}; }};\n'
        )
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
key "{KEY_NAME}" {{ algorithm {algorithm}; secret "{secret}"; }};
{zone_blocks}"""
    )
    with _serve(program, folder, port, zone) as process:
        yield Named(port, zone, KEY_NAME, secret, secret_file, folder / "named.log", process)


@contextlib.contextmanager
def restarted(program: str, server: Named) -> Iterator[Named]:
    """`server` started again after it stopped: the same zones (with the updates it took), port and key."""
    folder = server.log.parent
    with _serve(program, folder, server.port, server.zone, log_name="named-restarted.log") as process:
        yield dataclasses.replace(server, process=process)


@contextlib.contextmanager
def _serve(
    program: str, folder: Path, port: int, zone: str, log_name: str = "named.log"
) -> Iterator[subprocess.Popen[bytes]]:
    log = folder / log_name
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
        yield process
