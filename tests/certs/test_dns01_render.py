"""What the edges are told for DNS-01 through RFC 2136 and for a private ACME CA: lego finds the zone and
polls for the record at the server it updates (no propagation wait unless asked), certbot waits only the
configured seconds, and acme.ca_bundle reaches both as a read-only file, checked at load. The real
programs run this very configuration in test_dns01_issuance.py."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from homelab.cli import app
from homelab.config.loader import load
from homelab.errors import ConfigError
from homelab.plan import build_plan
from homelab.render import edge_nginx, render_all
from homelab.render.edge_traefik import static_config
from homelab.secrets import user_secret_values
from tests.certs.conftest import dns01_config, make_cert

SECRET = "c2VjcmV0LXRzaWcta2V5LXZhbHVl"


def _compose(config: Path) -> dict[str, Any]:
    loaded = load(config)
    rendering = render_all(build_plan(loaded), user_secret_values(loaded))
    return yaml.safe_load(rendering.files["edge/compose.yaml"])["services"]  # type: ignore[no-any-return]


def test_lego_polls_the_rfc2136_server(tmp_path: Path) -> None:
    plan = build_plan(load(dns01_config(tmp_path, 5353, SECRET)))
    for resolver in static_config(plan)["certificatesResolvers"].values():
        assert resolver["acme"]["dnsChallenge"] == {
            "provider": "rfc2136",
            "resolvers": ["127.0.0.1:5353"],
            "propagation": {"disableANSChecks": True, "delayBeforeChecks": "0s"},
        }
    environment = _compose(tmp_path / "homelab.yaml")["traefik"]["environment"]
    assert (environment["RFC2136_SEQUENCE_INTERVAL"], environment["RFC2136_POLLING_INTERVAL"]) == ("1", "1")


def test_propagation_seconds_reach_both_edges(tmp_path: Path) -> None:
    config = dns01_config(tmp_path / "t", 53, SECRET, rfc2136={"server": "fd00::53", "propagation_seconds": 7})
    resolver = static_config(build_plan(load(config)))["certificatesResolvers"]["le"]["acme"]
    assert resolver["dnsChallenge"]["resolvers"] == ["[fd00::53]:53"]
    assert resolver["dnsChallenge"]["propagation"]["delayBeforeChecks"] == "7s"
    config = dns01_config(tmp_path / "n", 53, SECRET, edge="nginx", rfc2136={"propagation_seconds": 7})
    assert "--dns-rfc2136-propagation-seconds 7" in edge_nginx.certbot_sh(build_plan(load(config)))


def test_other_providers_keep_their_wait(tmp_path: Path) -> None:
    config = dns01_config(tmp_path, 53, SECRET)
    data = yaml.safe_load(config.read_text())
    data["domain"]["acme"] = {
        "email": "a@example.com", "challenge": "dns", "dns_provider": "cloudflare",
        "dns_credentials": {"CF_DNS_API_TOKEN": "secrets/tsig"},
    }  # fmt: skip
    config.write_text(yaml.safe_dump(data))
    resolver = static_config(build_plan(load(config)))["certificatesResolvers"]["le"]["acme"]
    assert resolver["dnsChallenge"] == {"provider": "cloudflare", "propagation": {"delayBeforeChecks": "10s"}}


@pytest.mark.parametrize(("edge", "service", "variable"), [
    ("traefik", "traefik", "LEGO_CA_CERTIFICATES"),
    ("nginx", "certbot", "REQUESTS_CA_BUNDLE"),
])  # fmt: skip
def test_ca_bundle_is_a_read_only_file_the_acme_client_trusts(
    tmp_path: Path, edge: str, service: str, variable: str
) -> None:
    bundle = tmp_path / "company-ca.pem"
    pem = make_cert(["Company Root CA"])
    bundle.write_bytes(pem)
    config = dns01_config(tmp_path / "config", 5353, SECRET, edge=edge, ca_bundle=bundle)
    loaded = load(config)
    rendering = render_all(build_plan(loaded), user_secret_values(loaded))
    spec = yaml.safe_load(rendering.files["edge/compose.yaml"])["services"][service]
    assert spec["environment"][variable] == "/etc/ssl/homelab-acme-ca.pem"
    mount = {"type": "bind", "source": str(bundle), "target": "/etc/ssl/homelab-acme-ca.pem", "read_only": True}
    assert mount in spec["volumes"]
    assert "homelab-acme-ca" not in str(spec.get("secrets"))  # a certificate, not a secret
    assert all(pem not in content for content in rendering.files.values())


@pytest.mark.parametrize(("make", "problem"), [
    (lambda p: None, ": no such file (the path is relative to homelab.yaml's folder)"),
    (lambda p: p.mkdir(), ": it is a folder, not a regular file"),
    (lambda p: os.mkfifo(p), ": it is a named pipe (FIFO), not a regular file"),  # would block a plain read
    (lambda p: p.write_text("not a certificate\n"), " holds no PEM certificate (expected -----BEGIN CERTIFICATE-----"),
])  # fmt: skip
def test_ca_bundle_is_checked_at_load(tmp_path: Path, make: Any, problem: str) -> None:
    bundle = tmp_path / "ca.pem"
    make(bundle)
    config = dns01_config(tmp_path / "config", 5353, SECRET, ca_bundle=bundle)
    line = next(i for i, text in enumerate(config.read_text().splitlines(), 1) if "ca_bundle:" in text)
    with pytest.raises(ConfigError) as raised:
        load(config)
    assert str(raised.value).startswith(f"{config}:{line}: domain.acme.ca_bundle: {bundle}{problem}")
    result = CliRunner().invoke(app, ["validate", "--config", str(config)])
    assert result.exit_code == 2
    assert f"domain.acme.ca_bundle: {bundle}{problem}" in result.stderr
