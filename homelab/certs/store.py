"""What the edge holds: the certificates in Traefik's acme.json and in certbot's lineages, read from the
host (the edge's datasets), as typed records. Nothing here writes."""

from __future__ import annotations

import base64
import binascii
import configparser
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from homelab.engine.host import acme_json_path
from homelab.errors import HomelabError, NodeDown
from homelab.plan_model import Plan

if TYPE_CHECKING:  # imported where a certificate is read: render and plan import this module (~20 ms)
    from cryptography import x509

# The ACME directories (and account URLs) of Let's Encrypt: everything else is a test or other CA.
LETSENCRYPT_HOST = "acme-v02.api.letsencrypt.org"
LETSENCRYPT_STAGING_HOST = "acme-staging-v02.api.letsencrypt.org"
CaKind = Literal["production", "staging", "test", "other"]
CHALLENGE_NAMES = {"http": "http-01", "tls": "tls-alpn-01", "dns": "dns-01"}


class UnreadableStore(HomelabError):
    """acme.json or a certbot lineage exists but cannot be read or parsed."""

    exit_code = 2


@dataclass(frozen=True)
class Issued:
    """One certificate a CA issued to this box (one order that succeeded)."""

    names: frozenset[str]
    serial: str  # hex: dedupes the same certificate seen in acme.json, certbot's archive and the ledger
    not_before: datetime
    not_after: datetime
    issuer: str  # the issuer's CN (O when it has none)
    ca: CaKind
    source: str  # the file it was read from
    challenge: str  # http-01, tls-alpn-01, dns-01 or "" when the store does not say

    def covers(self, host: str) -> bool:
        """The name itself, or a wildcard one label up (`*.example.com` covers `plex.example.com`)."""
        return host in self.names or "*." + host.partition(".")[2] in self.names


@dataclass(frozen=True)
class Holdings:
    """Every certificate the edge's store holds: `served` are those it serves now (the newest per
    name), `history` every one it still has a copy of (certbot keeps each renewal in archive/)."""

    served: list[Issued]
    history: list[Issued]


def ca_kind_of_url(url: str) -> CaKind:
    if LETSENCRYPT_STAGING_HOST in url:
        return "staging"
    if LETSENCRYPT_HOST in url:
        return "production"
    return "test" if url else "other"


def ca_kind_of_issuer(issuer: str) -> CaKind:
    """Let's Encrypt's staging hierarchy names itself "(STAGING)" (older: "Fake LE"); Pebble "Pebble"."""
    lowered = issuer.lower()
    if "staging" in lowered or "fake le" in lowered:
        return "staging"
    if "pebble" in lowered:
        return "test"
    return "production" if "let's encrypt" in lowered or lowered in LE_INTERMEDIATES else "other"


# Let's Encrypt's intermediates carry O=Let's Encrypt; these CNs alone also identify it.
LE_INTERMEDIATES = {"r3", "r10", "r11", "r12", "r13", "r14", "e5", "e6", "e7", "e8", "e9"}


def parse_certificate(pem: bytes, source: str, challenge: str, ca_url: str = "") -> Issued:
    """The leaf (first PEM block) of `pem`. The CA is taken from the ACME URL the store was issued
    through when known, else from the issuer's name."""
    from cryptography import x509

    try:
        cert = x509.load_pem_x509_certificate(pem)
    except ValueError as exc:
        raise UnreadableStore(f"{source}: not a PEM certificate ({exc})") from None
    issuer = _name(cert.issuer)
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        names = frozenset(n.lower() for n in sans.get_values_for_type(x509.DNSName))
    except x509.ExtensionNotFound:
        names = frozenset({_name(cert.subject).lower()})
    ca = ca_kind_of_url(ca_url) if ca_url else ca_kind_of_issuer(issuer)
    return Issued(
        names=names,
        serial=f"{cert.serial_number:x}",
        not_before=cert.not_valid_before_utc,
        not_after=cert.not_valid_after_utc,
        issuer=issuer,
        ca=ca,
        source=source,
        challenge=challenge,
    )


def _name(name: x509.Name) -> str:
    from cryptography.x509.oid import NameOID

    for oid in (NameOID.COMMON_NAME, NameOID.ORGANIZATION_NAME):
        values = name.get_attributes_for_oid(oid)
        if values:
            return str(values[0].value)
    return name.rfc4514_string()


# The text of a file where the edge runs, None when it is not there (the engine's `read_file`: on Swarm
# the edge node's, with the private keys blanked; OSError when it cannot be read).
Reader = Callable[[Path], str | None]


def read_here(path: Path) -> str | None:
    """A file on this host (the Compose engine's edge runs here)."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None


def read_acme_json(path: Path, challenge: str, read: Reader = read_here) -> Holdings:
    """Every certificate of every resolver in Traefik's store."""
    served = [c for held in read_resolvers(path, challenge, read).values() for c in held]
    return Holdings(served, list(served))


def read_resolvers(path: Path, challenge: str = "", read: Reader = read_here) -> dict[str, list[Issued]]:
    """Traefik's store: {resolver: {Account: {Registration: {uri}}, Certificates: [{certificate}]}}, as
    the certificates per resolver, in the store's order."""
    try:
        text = read(path)
    except NodeDown:
        raise  # not a bad store: the guard says why it cannot count (certs/guard.py)
    except OSError as exc:
        raise UnreadableStore(f"{path}: cannot read ({exc.strerror or exc})") from None
    if text is None:
        return {}
    if not text.strip():
        return {}  # Traefik's store before its first certificate
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise UnreadableStore(f"{path}: not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise UnreadableStore(f"{path}: expected an object of resolvers")
    held: dict[str, list[Issued]] = {}
    for resolver, content in data.items():
        if not isinstance(content, dict):
            raise UnreadableStore(f"{path}: resolver {resolver!r} is not an object")
        account = content.get("Account") or {}
        url = str(((account.get("Registration") or {}).get("uri")) or "")
        held[resolver] = []
        for index, entry in enumerate(content.get("Certificates") or []):
            where = f"{path}: {resolver}.Certificates[{index}]"
            try:
                pem = base64.b64decode(entry["certificate"], validate=True)
            except (KeyError, TypeError, binascii.Error):
                raise UnreadableStore(f"{where}: no base64 certificate") from None
            held[resolver].append(parse_certificate(pem, where, challenge, url))
    return held


def read_certbot(config_dir: Path) -> Holdings:
    """certbot's lineages: live/<name>/cert.pem is served, archive/<name>/cert<N>.pem is every
    certificate of the lineage, renewal/<name>.conf names the ACME server and the authenticator."""
    renewal = config_dir / "renewal"
    if not renewal.is_dir():
        return Holdings([], [])
    served, history = [], []
    for conf in sorted(renewal.glob("*.conf")):
        lineage = conf.name.removesuffix(".conf")
        server, challenge = _renewal_params(conf)
        live = config_dir / "live" / lineage / "cert.pem"
        archived = sorted((config_dir / "archive" / lineage).glob("cert*.pem"))
        try:
            history += [parse_certificate(p.read_bytes(), str(p), challenge, server) for p in archived]
            if live.exists():
                served.append(parse_certificate(live.read_bytes(), str(live), challenge, server))
        except OSError as exc:
            raise UnreadableStore(f"{config_dir}: lineage {lineage}: cannot read ({exc.strerror})") from None
    return Holdings(served, history)


def _renewal_params(conf: Path) -> tuple[str, str]:
    parser = configparser.ConfigParser(interpolation=None)
    try:
        # certbot writes top-level keys before the first section; give them one
        parser.read_string("[top]\n" + conf.read_text(encoding="utf-8"))
    except (OSError, configparser.Error) as exc:
        raise UnreadableStore(f"{conf}: not a certbot renewal file ({exc})") from None
    params = parser["renewalparams"] if parser.has_section("renewalparams") else {}
    authenticator = params.get("authenticator", "")
    challenge = {"webroot": "http-01", "standalone": "http-01"}.get(authenticator, "")
    if authenticator.startswith("dns"):
        challenge = "dns-01"
    return params.get("server", ""), challenge


def store_path(plan: Plan) -> Path | None:
    """Where the edge keeps its certificates on the host: acme.json (Traefik) or certbot's folder."""
    if plan.config.edge.kind == "traefik":
        return acme_json_path(plan)
    dataset = next((d for d in plan.datasets if d.key == "edge/letsencrypt"), None)
    return Path(dataset.path) if dataset else None


def read_holdings(plan: Plan, read: Reader = read_here) -> Holdings:
    """The edge's certificates, read where the edge keeps them (`read`: the engine's; certbot's lineages
    are read on this host)."""
    path = store_path(plan)
    if path is None:
        return Holdings([], [])
    if plan.config.edge.kind == "traefik":
        return read_acme_json(path, CHALLENGE_NAMES[plan.config.domain.acme.challenge], read)
    return read_certbot(path)
