"""The rate-limit guard: budgets under Let's Encrypt's published limits, counted from the ledger and what
the edge holds; the retry dates below are worked out by hand from the entries each test writes."""

from __future__ import annotations

import json
import stat
from datetime import timedelta

import pytest
from typer.testing import CliRunner

from homelab.certs import guard
from homelab.certs.ledger import Ledger, Order, ledger_path, load_ledger
from homelab.certs.store import read_holdings, store_path
from homelab.cli import app
from homelab.errors import HomelabError, Refused
from tests.certs.conftest import LE_PROD, NOW, make_cert, write_acme_json

runner = CliRunner()
HOSTS = ["plex", "cloud", "git", "ci", "rstudio", "grafana"]


def _ledger(plan, issued=(), requested=()) -> Ledger:
    ledger = Ledger(ledger_path(plan), list(issued), list(requested))
    ledger.save()
    return ledger


def _issued(name: str, days_ago: float, serial: str) -> Order:
    return Order(frozenset({name}), NOW - timedelta(days=days_ago), serial)


def _all_served_but(plan, missing: str) -> None:
    issued = NOW - timedelta(days=3)
    certs = [(f"{h}.example.com", make_cert([f"{h}.example.com"], issued=issued)) for h in HOSTS if h != missing]
    write_acme_json(store_path(plan), certs, LE_PROD)


def test_lost_acme_json_after_four_orders_of_the_same_name_is_refused(make_plan) -> None:
    plan = make_plan(staging_first=False)
    _all_served_but(plan, "plex")  # plex's certificate was lost: the edge would order it again
    _ledger(plan, [_issued("plex.example.com", d, f"s{d}") for d in (6, 5, 4, 1)])
    with pytest.raises(Refused) as caught:
        guard.enforce(plan, dry_run=True, now=NOW)
    text = str(caught.value)
    assert "names plex.example.com: 4 in the last 7 days + 1 now" in text
    assert "'New Certificates per Exact Set of Identifiers' limit (5 per 7 days" in text
    assert '"too many certificates already issued for exact set of identifiers"' in text
    assert "try again after 2026-11-28 12:00 UTC" in text  # the oldest (6 days ago) leaves the week
    assert Refused.exit_code == 5


def test_three_of_the_same_name_still_pass(make_plan) -> None:
    plan = make_plan(staging_first=False)
    _all_served_but(plan, "plex")
    _ledger(plan, [_issued("plex.example.com", d, f"s{d}") for d in (6, 5, 4)])
    decision = guard.enforce(plan, dry_run=True, now=NOW)
    assert decision.orders == [frozenset({"plex.example.com"})]
    assert decision.refusals == []


def test_registered_domain_budget(make_plan) -> None:
    plan = make_plan(staging_first=False)  # nothing held: all six names would be ordered
    issued = [_issued(f"old{i}.example.com", 6.5 - i * 0.1, f"s{i}") for i in range(38)]
    _ledger(plan, issued)
    with pytest.raises(Refused) as caught:
        guard.enforce(plan, dry_run=True, now=NOW)
    text = str(caught.value)
    # 38 + 6 = 44 > 40: the 4 oldest must leave the window; the 4th oldest was 6.2 days ago,
    # so it leaves 0.8 days (19 h 12 min) after NOW (12:00)
    assert "registered domain example.com: 38 in the last 7 days + 6 now" in text
    assert '"too many certificates already issued")' in text
    assert "try again after 2026-11-28 07:12 UTC" in text


def test_orders_that_never_produced_a_certificate_count_as_failures(make_plan) -> None:
    plan = make_plan(staging_first=False)
    _all_served_but(plan, "cloud")
    minutes = (50, 30, 10)
    _ledger(plan, requested=[Order(frozenset({"cloud.example.com"}), NOW - timedelta(minutes=m)) for m in minutes])
    with pytest.raises(Refused) as caught:
        guard.enforce(plan, dry_run=True, now=NOW)
    text = str(caught.value)
    assert "name cloud.example.com: 3 in the last hour + 1 now" in text
    assert '"too many failed authorizations"' in text
    assert "try again after 2026-11-27 12:10 UTC" in text


def test_a_request_answered_by_a_certificate_is_not_a_failure(make_plan) -> None:
    plan = make_plan(staging_first=False)
    _all_served_but(plan, "cloud")
    at = NOW - timedelta(minutes=50)
    requested = [Order(frozenset({"cloud.example.com"}), at - timedelta(minutes=m)) for m in (0, 1, 2)]
    # two of the three came back as certificates (since lost); LE backdates notBefore by an hour
    issued = [Order(frozenset({"cloud.example.com"}), at - timedelta(hours=1), s) for s in ("a", "b")]
    _ledger(plan, issued, requested)
    assert guard.enforce(plan, dry_run=True, now=NOW).refusals == []


def test_staging_and_test_cas_are_not_guarded(make_plan) -> None:
    for plan in (make_plan(staging=True), make_plan(ca_server="https://127.0.0.1:14000/dir")):
        _ledger(plan, [_issued("plex.example.com", d, f"s{d}") for d in (6, 5, 4, 1, 0.5)])
        assert guard.enforce(plan, dry_run=False, now=NOW) == guard.Decision(False, [], [])


def test_renewals_and_restarts_order_nothing(make_plan) -> None:
    plan = make_plan(staging_first=False)
    _all_served_but(plan, "none")
    _ledger(plan, [_issued(f"n{i}.example.com", 1, f"s{i}") for i in range(60)])
    assert guard.enforce(plan, dry_run=False, now=NOW).orders == []


def test_up_records_its_orders_0600_and_the_held_certificates(make_plan) -> None:
    plan = make_plan(staging_first=False)
    _all_served_but(plan, "git")
    guard.enforce(plan, dry_run=True, now=NOW)
    assert not ledger_path(plan).exists()  # --dry-run writes nothing
    guard.enforce(plan, dry_run=False, now=NOW)
    path = ledger_path(plan)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    ledger = load_ledger(path)
    assert [sorted(o.names) for o in ledger.requested] == [["git.example.com"]]
    held = {c.serial for c in read_holdings(plan).history}
    assert {o.serial for o in ledger.issued} == held and len(held) == 5
    # losing acme.json does not lose the count
    store_path(plan).unlink()
    assert len(load_ledger(path).issued) == 5


def test_damaged_ledger_names_the_file(make_plan) -> None:
    plan = make_plan(staging_first=False)
    path = ledger_path(plan)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"issued": [{"names": "x", "at": "2026-01-01T00:00:00+00:00"}], "requested": []}))
    with pytest.raises(HomelabError) as caught:
        guard.enforce(plan, dry_run=True, now=NOW)
    assert str(caught.value).startswith(f"{path}: the certificate ledger is damaged")


def test_up_dry_run_refuses_with_exit_5_and_writes_nothing(make_plan, example_config, monkeypatch) -> None:
    from homelab.runtime.docker import Docker

    plan = make_plan(staging_first=False)
    _all_served_but(plan, "plex")
    recent = [_issued("plex.example.com", d, f"s{d}") for d in (0.4, 0.3, 0.2, 0.1)]
    _ledger(plan, recent)
    monkeypatch.setattr(Docker, "check", lambda self: "27.0")
    result = runner.invoke(app, ["up", "--dry-run", "--config", str(example_config)])
    assert result.exit_code == 5, result.output
    assert result.stderr.startswith("error: certificate rate-limit guard: not starting the edge")
    assert not (example_config.parent / "stacks").exists()


def test_a_wildcard_certificate_covers_every_name(make_plan) -> None:
    plan = make_plan(staging_first=False)
    wildcard = make_cert(["example.com", "*.example.com"], issued=NOW - timedelta(days=3))
    write_acme_json(store_path(plan), [("example.com", wildcard)], LE_PROD)
    _ledger(plan, [_issued("plex.example.com", d, f"s{d}") for d in (6, 5, 4, 1)])
    assert guard.enforce(plan, dry_run=True, now=NOW) == guard.Decision(True, [], [])


def test_staging_first_on_traefik_orders_from_production_only_past_staging(make_plan) -> None:
    from homelab.certs.staging import with_stages

    plan = make_plan()  # Traefik, Let's Encrypt, staging first
    # nothing past staging: `up` lets Traefik order nothing from production (staging is not guarded)
    assert guard.enforce(plan, dry_run=False, now=NOW) == guard.Decision(True, [], [])
    assert load_ledger(ledger_path(plan)).requested == []
    # staging issued plex (promoted): production is asked for it, within the budgets
    ledger = load_ledger(ledger_path(plan))
    ledger.record_staged([frozenset({"plex.example.com"})], "https://acme-v02.api.letsencrypt.org/directory", NOW)
    ledger.save()
    assert with_stages(plan).production_ready == {frozenset({"plex.example.com"})}
    decision = guard.enforce(plan, dry_run=False, now=NOW)
    assert decision.orders == [frozenset({"plex.example.com"})]
    assert [o.names for o in load_ledger(ledger_path(plan)).requested] == [frozenset({"plex.example.com"})]
