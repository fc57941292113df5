"""Certificates made here with the `cryptography` library (issuer names as the real CAs spell them), and
the two stores the edges keep them in: Traefik's acme.json and certbot's lineages."""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from typer.testing import CliRunner, Result

from homelab.cli import app
from homelab.config.loader import load
from homelab.plan import build_plan
from homelab.plan_model import Plan

NOW = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)
LE_PROD = "https://acme-v02.api.letsencrypt.org/acme/acct/123456"
LE_STAGING = "https://acme-staging-v02.api.letsencrypt.org/acme/acct/654321"
PEBBLE = "https://127.0.0.1:14000/my-account/1"
# How the real issuers name themselves
R11 = x509.Name(
    [x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Let's Encrypt"), x509.NameAttribute(NameOID.COMMON_NAME, "R11")]
)
STAGING = x509.Name(
    [
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "(STAGING) Let's Encrypt"),
        x509.NameAttribute(NameOID.COMMON_NAME, "(STAGING) Wannabe Watercress R11"),
    ]
)
PEBBLE_CA = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Pebble Intermediate CA 0a1b2c")])
_KEY = ec.generate_private_key(ec.SECP256R1())


def make_cert(
    names: list[str], issuer: x509.Name = R11, *, issued: datetime = NOW - timedelta(days=10), days: int = 90
) -> bytes:
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
        .issuer_name(issuer)
        .public_key(_KEY.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(issued)
        .not_valid_after(issued + timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in names]), critical=False)
    )
    return builder.sign(_KEY, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)


def write_acme_json(path: Path, certs: list[tuple[str, bytes]], account: str = LE_PROD) -> Path:
    """Traefik's layout (resolver "le"): each entry's certificate is the base64 of the PEM chain."""
    entries = [
        {
            "domain": {"main": main},
            "certificate": base64.b64encode(pem).decode(),
            "key": base64.b64encode(b"not a key").decode(),
            "Store": "default",
        }
        for main, pem in certs
    ]
    data = {"le": {"Account": {"Email": "a@example.com", "Registration": {"uri": account}}, "Certificates": entries}}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    path.chmod(0o600)
    return path


def write_lineage(config_dir: Path, name: str, pems: list[bytes], server: str) -> None:
    """certbot's layout: archive/<name>/certN.pem, live/<name>/cert.pem -> the newest, renewal/<name>.conf."""
    archive = config_dir / "archive" / name
    live = config_dir / "live" / name
    archive.mkdir(parents=True, exist_ok=True)
    live.mkdir(parents=True, exist_ok=True)
    for index, pem in enumerate(pems, start=1):
        (archive / f"cert{index}.pem").write_bytes(pem)
    link = live / "cert.pem"
    if link.is_symlink():
        link.unlink()
    os.symlink(f"../../archive/{name}/cert{len(pems)}.pem", link)
    renewal = config_dir / "renewal"
    renewal.mkdir(exist_ok=True)
    (renewal / f"{name}.conf").write_text(
        f"# renew_before_expiry = 30 days\nversion = 2.1.0\narchive_dir = {archive}\n"
        f"cert = {live}/cert.pem\n\n[renewalparams]\naccount = abc\nauthenticator = webroot\n"
        f"webroot_path = /var/www/certbot,\nserver = {server}\nkey_type = ecdsa\n"
    )


@pytest.fixture
def make_plan(example_config: Path, tmp_path: Path) -> Callable[..., Plan]:
    """The example config with storage under tmp_path; `edge`, `staging`, `ca_server`, `staging_first` as
    asked."""

    original = example_config.read_text()

    def _make(
        edge: str = "traefik", staging: bool = False, ca_server: str | None = None, staging_first: bool = True
    ) -> Plan:
        text = original.replace("mountpoint: /tank/homelab", f"mountpoint: {tmp_path}/tank")
        text = text.replace("kind: traefik", f"kind: {edge}")
        if edge == "nginx":
            text = text.replace("challenge: tls", "challenge: http")
        text = text.replace("staging: false", f"staging: {str(staging).lower()}")
        if ca_server:
            text = text.replace("staging: false", f"staging: false\n    ca_server: {ca_server}")
        if not staging_first:
            text = text.replace("staging: false", "staging: false\n    staging_first: false")
        example_config.write_text(text)
        return build_plan(load(example_config))

    return _make


def run_check(config: Path, dns_port: int, address: str) -> Result:
    """`homelab certs check` asking the DNS server on 127.0.0.1:dns_port."""
    argv = ["certs", "check", "--config", str(config), "--nameserver", "127.0.0.1", "--dns-port", str(dns_port)]
    return CliRunner().invoke(app, [*argv, "--address", address])


def dns01_config(
    folder: Path,
    server_port: int,
    secret: str,
    *,
    edge: str = "traefik",
    wildcard: bool = True,
    ca_server: str | None = None,
    staging_ca_server: str | None = None,
    domain: str = "example.com",
    rfc2136: dict[str, object] | None = None,
    ca_bundle: Path | None = None,
) -> Path:
    """The bundled example on the DNS-01 challenge through RFC 2136 (tests/certs/named.py's key) at
    127.0.0.1:server_port, its TSIG secret in secrets/tsig (0600); `rfc2136` overrides that section's keys."""
    from tests.certs.named import ALGORITHM, KEY_NAME
    from tests.conftest import EXAMPLE, EXAMPLE_SECRETS, write_secret

    folder.mkdir(parents=True, exist_ok=True)
    data = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    data["edge"]["kind"] = edge
    data["storage"]["mountpoint"] = str(folder / "tank")
    data["domain"]["wildcard"] = wildcard
    data["domain"]["name"] = domain
    acme = data["domain"]["acme"]
    acme.update(challenge="dns", dns_provider="rfc2136")
    acme["rfc2136"] = {
        "server": "127.0.0.1",
        "port": server_port,
        "tsig_key": KEY_NAME,
        "tsig_algorithm": ALGORITHM,
        "tsig_secret_file": "secrets/tsig",
        **(rfc2136 or {}),
    }
    if ca_server:
        acme["ca_server"] = ca_server
    if staging_ca_server:
        acme["staging_ca_server"] = staging_ca_server
    if ca_bundle:
        acme["ca_bundle"] = str(ca_bundle)
    (folder / "homelab.yaml").write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    for name in EXAMPLE_SECRETS:
        write_secret(folder / "secrets" / name, f"example-{name}-value")
    write_secret(folder / "secrets" / "tsig", secret)
    return folder / "homelab.yaml"
