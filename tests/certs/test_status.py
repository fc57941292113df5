"""`homelab certs`: per served name, from certificates made here and stored the way each edge stores them."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from typer.testing import CliRunner

from homelab.certs import name_status as status_module
from homelab.certs.ledger import Ledger
from homelab.certs.name_status import name_statuses
from homelab.certs.store import UnreadableStore, read_holdings, store_path
from homelab.cli import app
from homelab.runtime import docker as docker_module
from tests.certs.conftest import (
    LE_PROD,
    LE_STAGING,
    NOW,
    PEBBLE,
    PEBBLE_CA,
    STAGING,
    make_cert,
    write_acme_json,
    write_lineage,
)
from tests.fakes.docker import FakeDocker

runner = CliRunner()


def _rows(plan, tmp_path):
    return {r.name: r for r in name_statuses(plan, read_holdings(plan), Ledger(tmp_path / "l.json", [], []), NOW)}


def test_traefik_production_certificate_and_a_name_without_one(make_plan, tmp_path) -> None:
    plan = make_plan()
    write_acme_json(store_path(plan), [("plex.example.com", make_cert(["plex.example.com"]))], LE_PROD)
    rows = _rows(plan, tmp_path)
    plex = rows["plex.example.com"]
    assert (plex.issuer, plex.ca, plex.days_left, plex.challenge) == ("R11", "production", 80, "tls-alpn-01")
    assert plex.expires.startswith("2027-02-15")  # issued 2026-11-17 + 90 days
    assert plex.last_error == ""
    assert plex.orders_7d == 0  # issued 10 days ago
    assert rows["cloud.example.com"].last_error == "no certificate yet"
    assert rows["cloud.example.com"].days_left is None


def test_staging_pebble_and_mismatch_are_told_apart(make_plan, tmp_path) -> None:
    plan = make_plan(staging=True)
    write_acme_json(store_path(plan), [("plex.example.com", make_cert(["plex.example.com"], STAGING))], LE_STAGING)
    plex = _rows(plan, tmp_path)["plex.example.com"]
    assert (plex.ca, plex.issuer, plex.last_error) == ("staging", "(STAGING) Wannabe Watercress R11", "")

    # production configured, a staging certificate still served (the store's account is staging)
    plan = make_plan(staging_first=False)
    plex = _rows(plan, tmp_path)["plex.example.com"]
    assert plex.last_error == "served by a staging CA while production Let's Encrypt is configured"
    # with staging first that is the step before production: doctor warns, does not fail
    plan = make_plan()
    assert _rows(plan, tmp_path)["plex.example.com"].last_error == status_module.STAGED
    checks = {c.name: c for c in status_module.held_checks(plan, NOW)}
    assert checks["plex.example.com certificate"].level == "warn"


def test_pebble_is_a_test_ca(make_plan, tmp_path) -> None:
    plan = make_plan(ca_server="https://127.0.0.1:14000/dir")
    write_acme_json(store_path(plan), [("git.example.com", make_cert(["git.example.com"], PEBBLE_CA))], PEBBLE)
    git = _rows(plan, tmp_path)["git.example.com"]
    assert (git.ca, git.issuer, git.last_error) == ("test", "Pebble Intermediate CA 0a1b2c", "")


def test_certbot_lineage_history_counts_orders_of_the_week(make_plan, tmp_path) -> None:
    plan = make_plan(edge="nginx")
    pems = [
        make_cert(["plex.example.com"], issued=NOW - timedelta(days=100)),
        make_cert(["plex.example.com"], issued=NOW - timedelta(days=40)),
        make_cert(["plex.example.com"], issued=NOW - timedelta(days=2)),
    ]
    write_lineage(store_path(plan), "plex.example.com", pems, "https://acme-v02.api.letsencrypt.org/directory")
    plex = _rows(plan, tmp_path)["plex.example.com"]
    assert (plex.ca, plex.challenge, plex.days_left, plex.orders_7d) == ("production", "http-01", 88, 1)


def test_expired_certificate_is_an_error(make_plan, tmp_path) -> None:
    plan = make_plan()
    old = make_cert(["ci.example.com"], issued=NOW - timedelta(days=100))
    write_acme_json(store_path(plan), [("ci.example.com", old)], LE_PROD)
    ci = _rows(plan, tmp_path)["ci.example.com"]
    assert ci.days_left == -10
    assert ci.last_error == "expired: renewal failed; run `homelab certs check`"


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("{not json", "not JSON"),
        ("[]", "expected an object of resolvers"),
        ('{"le": {"Certificates": [{"certificate": "***"}]}}', "le.Certificates[0]: no base64 certificate"),
        ('{"le": {"Certificates": [{"certificate": "aGVsbG8="}]}}', "le.Certificates[0]: not a PEM certificate"),
    ],
)
def test_damaged_acme_json_is_named(make_plan, content: str, problem: str) -> None:
    plan = make_plan()
    path = store_path(plan)
    path.parent.mkdir(parents=True)
    path.write_text(content)
    with pytest.raises(UnreadableStore) as caught:
        read_holdings(plan)
    assert str(path) in str(caught.value)
    assert problem in str(caught.value)


@pytest.fixture
def engine(monkeypatch):
    """`homelab certs` reads the edge's log from the engine: a fake one, running nothing."""
    fake = FakeDocker()
    monkeypatch.setattr(docker_module, "Docker", lambda: fake)
    return fake


def test_cli_json_and_table(make_plan, example_config, monkeypatch, engine) -> None:
    plan = make_plan()
    write_acme_json(store_path(plan), [("plex.example.com", make_cert(["plex.example.com"]))], LE_PROD)
    monkeypatch.setattr(status_module, "datetime", _Frozen)
    result = runner.invoke(app, ["certs", "--json", "--config", str(example_config)])
    assert result.exit_code == 1, result.output  # five names have no certificate yet
    rows = {r["name"]: r for r in json.loads(result.stdout)}
    assert rows["plex.example.com"]["days_left"] == 80
    assert rows["plex.example.com"]["ca"] == "production"
    assert rows["grafana.example.com"]["last_error"] == "no certificate yet"
    table = runner.invoke(app, ["certs", "--config", str(example_config)])
    lines = table.stdout.splitlines()
    assert lines[0].split() == [
        "NAME",
        "ISSUER",
        "CA",
        "EXPIRES",
        "DAYS",
        "CHALLENGE",
        "ORDERS/7D",
        "LAST",
        "ERROR",
        "NEXT",
        "TRY",
    ]
    assert lines[1].split()[:7] == ["plex.example.com", "R11", "production", "2027-02-15", "80", "tls-alpn-01", "0"]


def test_cli_damaged_store_exits_2(make_plan, example_config, engine) -> None:
    plan = make_plan()
    store_path(plan).parent.mkdir(parents=True)
    store_path(plan).write_text("{")
    result = runner.invoke(app, ["certs", "--config", str(example_config)])
    assert result.exit_code == 2
    assert f"error: {store_path(plan)}: not JSON" in result.stderr


class _Frozen:
    @staticmethod
    def now(tz=None):
        return NOW


def test_doctor_sees_expired_and_missing_certificates(make_plan) -> None:
    plan = make_plan()
    old = make_cert(["ci.example.com"], issued=NOW - timedelta(days=100))
    write_acme_json(store_path(plan), [("ci.example.com", old), ("plex.example.com", make_cert(["plex.example.com"]))])
    checks = {c.name: c for c in status_module.held_checks(plan, NOW)}
    assert (checks["ci.example.com certificate"].level, checks["ci.example.com certificate"].detail) == (
        "fail",
        "expired: renewal failed; run `homelab certs check`",
    )
    assert checks["plex.example.com certificate"].detail == "production, 80 days left"
    assert checks["cloud.example.com certificate"].level == "warn"
    store_path(plan).write_text("{")
    [broken] = status_module.held_checks(plan, NOW)
    assert broken.level == "fail" and broken.detail.startswith(f"{store_path(plan)}: not JSON")
