"""Staging first, wildcard and RFC 2136 in the renders and the switch (fast: no CA, no DNS server; the
real Traefik, certbot, Pebbles and named run in test_staging_traefik.py / test_staging_certbot.py)."""

from __future__ import annotations

import base64
import dataclasses
import json
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from homelab.certs import staging
from homelab.certs.ledger import ledger_path, load_ledger
from homelab.certs.policy import LETSENCRYPT, LETSENCRYPT_STAGING, RESOLVER, STAGING_RESOLVER
from homelab.certs.store import read_resolvers
from homelab.config.loader import load
from homelab.engine.host import acme_json_path
from homelab.errors import HomelabError
from homelab.plan import build_plan
from homelab.plan_model import Plan
from homelab.render import edge_nginx, render_all
from homelab.render.edge_traefik import route_labels, static_config
from homelab.secrets import user_secret_values
from tests.certs.conftest import LE_PROD, LE_STAGING, STAGING, dns01_config, make_cert

SECRET = "c2VjcmV0LXRzaWcta2V5LXZhbHVl"
WILDCARD = frozenset({"example.com", "*.example.com"})


def _plan(tmp_path: Path, **kwargs: object) -> Plan:
    return build_plan(load(dns01_config(tmp_path / "config", 5353, SECRET, **kwargs)))  # type: ignore[arg-type]


def _acme(path: Path, resolvers: dict[str, tuple[str, list[bytes]]]) -> None:
    data = {
        name: {
            "Account": {"Registration": {"uri": account}},
            "Certificates": [
                {"domain": {"main": "x"}, "certificate": base64.b64encode(pem).decode(), "key": "", "Store": "default"}
                for pem in pems
            ],
        }
        for name, (account, pems) in resolvers.items()
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    path.chmod(0o600)


def test_staging_first_by_default_and_its_opt_outs(make_plan: Callable[..., Plan]) -> None:
    resolvers = static_config(make_plan())["certificatesResolvers"]
    assert {n: r["acme"]["caServer"] for n, r in resolvers.items()} == {
        RESOLVER: LETSENCRYPT,
        STAGING_RESOLVER: LETSENCRYPT_STAGING,
    }
    assert resolvers[RESOLVER]["acme"]["storage"] == resolvers[STAGING_RESOLVER]["acme"]["storage"]
    assert set(static_config(make_plan(staging=True))["certificatesResolvers"]) == {RESOLVER}
    # a custom CA without a staging CA to pair it with: used directly
    assert set(static_config(make_plan(ca_server="https://127.0.0.1:14000/dir"))["certificatesResolvers"]) == {RESOLVER}


def test_staging_first_off(tmp_path: Path) -> None:
    config = dns01_config(tmp_path / "config", 5353, SECRET)
    config.write_text(config.read_text().replace("staging: false", "staging: false\n    staging_first: false"))
    plan = build_plan(load(config))
    assert set(static_config(plan)["certificatesResolvers"]) == {RESOLVER}
    assert all(v != STAGING_RESOLVER for r in plan.routes for v in route_labels(plan, r).values())
    assert "--dry-run" not in edge_nginx.certbot_sh(plan)


def test_the_switch_and_the_wildcard_labels(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    route = next(r for r in plan.routes if r.app == "nextcloud")
    labels = route_labels(plan, route)
    assert labels["traefik.http.routers.nextcloud.tls.certresolver"] == STAGING_RESOLVER
    assert labels["traefik.http.routers.nextcloud.tls.domains[0].main"] == "example.com"
    assert labels["traefik.http.routers.nextcloud.tls.domains[0].sans"] == "*.example.com"
    ready = dataclasses.replace(plan, production_ready=frozenset({WILDCARD}))
    assert route_labels(ready, route)["traefik.http.routers.nextcloud.tls.certresolver"] == RESOLVER


def test_promote_drops_the_staging_certificate_and_remembers_the_set(tmp_path: Path) -> None:
    plan = _plan(tmp_path, wildcard=False)
    acme = acme_json_path(plan)
    assert acme is not None
    cloud, git = make_cert(["cloud.example.com"], STAGING), make_cert(["git.example.com"])
    _acme(acme, {STAGING_RESOLVER: (LE_STAGING, [cloud]), RESOLVER: (LE_PROD, [git])})
    # a staging certificate still in acme.json would block production's order: not ready before promote
    assert staging.with_stages(plan).production_ready == {frozenset({"git.example.com"})}

    assert staging.promote(plan, acme) == [frozenset({"cloud.example.com"})]
    held = read_resolvers(acme)
    assert held[STAGING_RESOLVER] == [] and [c.names for c in held[RESOLVER]] == [frozenset({"git.example.com"})]
    assert json.loads(acme.read_text())[STAGING_RESOLVER]["Account"]["Registration"]["uri"] == LE_STAGING
    assert acme.stat().st_mode & 0o777 == 0o600
    both = {frozenset({"cloud.example.com"}), frozenset({"git.example.com"})}
    assert staging.with_stages(plan).production_ready == both  # the ledger remembers the set
    assert staging.promote(plan, acme) == []
    staged = load_ledger(ledger_path(plan)).staged
    assert [(s.names, s.ca) for s in staged] == [(frozenset({"cloud.example.com"}), LETSENCRYPT)]
    assert ledger_path(plan).stat().st_mode & 0o777 == 0o600

    # another production CA: staging again
    moved = _plan(
        tmp_path, wildcard=False, ca_server="https://ca.example.net/dir", staging_ca_server=LETSENCRYPT_STAGING
    )
    assert staging.with_stages(moved).production_ready == {frozenset({"git.example.com"})}


def test_a_ledger_from_before_staging_first_loads(tmp_path: Path) -> None:
    path = tmp_path / "ledger.json"
    path.write_text(json.dumps({"issued": [], "requested": []}))
    assert load_ledger(path).staged == []
    path.write_text(json.dumps({"issued": [], "requested": [], "staged": [{"names": ["a"], "at": "2026-01-01"}]}))
    with pytest.raises(HomelabError, match="ledger is damaged"):
        load_ledger(path)


def test_certbot_sh_staging_then_production_over_rfc2136(tmp_path: Path) -> None:
    script = edge_nginx.certbot_sh(_plan(tmp_path, edge="nginx"))
    dry_run = script.index(f'attempt "$name" certonly --dry-run --server {LETSENCRYPT_STAGING}')
    assert script.index(f'attempt "$name" certonly --server {LETSENCRYPT} ') > dry_run
    assert 'issue "example.com" -d "example.com" -d "*.example.com"' in script
    assert "CREDENTIALS=/run/rfc2136.ini" in script
    assert 'AUTH="--dns-rfc2136 --dns-rfc2136-credentials $CREDENTIALS --dns-rfc2136-propagation-seconds 0"' in script
    assert '"$(cat "$RFC2136_TSIG_SECRET_FILE")"' in script and SECRET not in script
    assert "--webroot" not in script
    http = edge_nginx.certbot_sh(build_plan(load(_http_nginx(tmp_path))))
    assert 'issue "cloud.example.com" -d "cloud.example.com"' in http and "--webroot -w /var/www/certbot" in http


def _http_nginx(tmp_path: Path) -> Path:
    config = dns01_config(tmp_path / "http", 5353, SECRET, edge="nginx", wildcard=False)
    data = yaml.safe_load(config.read_text())
    data["domain"]["acme"] = {"email": "a@example.com", "challenge": "http"}
    config.write_text(yaml.safe_dump(data))
    return config


@pytest.mark.parametrize("edge", ["traefik", "nginx"])
def test_the_tsig_secret_reaches_the_edge_as_a_file_only(tmp_path: Path, edge: str) -> None:
    config = dns01_config(tmp_path / "config", 5353, SECRET, edge=edge)
    loaded = load(config)
    plan = build_plan(loaded)
    rendering = render_all(plan, user_secret_values(loaded))
    assert all(SECRET.encode() not in content for content in rendering.files.values())
    service = yaml.safe_load(rendering.files["edge/compose.yaml"])["services"][
        "traefik" if edge == "traefik" else "certbot"
    ]
    assert service["environment"]["RFC2136_TSIG_SECRET_FILE"] == "/run/secrets/edge_acme_rfc2136_tsig"
    assert "edge_acme_rfc2136_tsig" in service["secrets"]
    if edge == "traefik":
        assert service["environment"]["RFC2136_NAMESERVER"] == "127.0.0.1:5353"
        assert service["environment"]["RFC2136_TSIG_ALGORITHM"] == "hmac-sha256."
    else:
        assert service["image"] == "certbot/dns-rfc2136:v3.0.1"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"wildcard": True, "acme": {"challenge": "tls"}}, "wildcard certificates need challenge 'dns'"),
        ({"acme": {"rfc2136": None}}, "dns_provider 'rfc2136' and the rfc2136 section go together"),
        ({"acme": {"dns_provider": "cloudflare"}}, "dns_provider 'rfc2136' and the rfc2136 section go together"),
    ],
)
def test_config_rules(tmp_path: Path, change: dict[str, object], message: str) -> None:
    config = dns01_config(tmp_path / "config", 5353, SECRET)
    data = yaml.safe_load(config.read_text())
    acme = change.pop("acme", {})
    data["domain"].update(change)
    for key, value in acme.items():  # type: ignore[attr-defined]
        if value is None:
            data["domain"]["acme"].pop(key)
        elif key == "challenge":
            data["domain"]["acme"] = {"email": "a@example.com", "challenge": value}
        else:
            data["domain"]["acme"][key] = value
    config.write_text(yaml.safe_dump(data))
    with pytest.raises(HomelabError, match=message):
        load(config)


def test_nginx_dns_needs_rfc2136(tmp_path: Path) -> None:
    config = dns01_config(tmp_path / "config", 5353, SECRET, edge="nginx")
    data = yaml.safe_load(config.read_text())
    acme = data["domain"]["acme"]
    acme.pop("rfc2136")
    acme["dns_provider"] = "cloudflare"
    data["domain"]["wildcard"] = False
    config.write_text(yaml.safe_dump(data))
    with pytest.raises(HomelabError, match="the nginx edge's certbot has the rfc2136 DNS plugin only"):
        load(config)
