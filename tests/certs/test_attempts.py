"""The edge's failed orders and open challenges read from its log (lines as Traefik 3.7.15 and certbot.sh
wrote them in tests/certs/test_attempts_real.py), and what `homelab certs` and `up` make of them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from homelab.certs import attempts, challenges
from homelab.certs.ledger import Ledger, Order
from homelab.certs.name_status import name_statuses
from homelab.certs.store import Holdings, Issued
from homelab.cli import app
from homelab.config.loader import load
from homelab.plan import build_plan
from homelab.plan_model import Plan
from tests.certs.conftest import NOW, dns01_config
from tests.fakes.docker import FakeDocker, container

SECRET = "c2VjcmV0LXRzaWcta2V5LXZhbHVl"
C = "\x1b[36m", "\x1b[0m"  # Traefik colours keys, TTY or not
REFUSED = (
    "2026-12-02T06:55:33-05:00 \x1b[31mERR\x1b[0m Unable to obtain ACME certificate for domains "
    f'{C[0]}error={C[1]}"unable to generate a certificate for the domains [git.example.com]: resolver: one or more '
    "domains had a problem: [git.example.com: dns01: error presenting token (git.example.com): dnsupdate: failed "
    'to insert: DNS update failed: server 127.0.0.1:41543 replied REFUSED for INSERT example.com.]" ACME '
    f'CA=https://127.0.0.1:40387/dir {C[0]}domains={C[1]}["git.example.com"] {C[0]}providerName={C[1]}le.acme '
    "routerName=gitea@file rule=Host(`git.example.com`)\n"
)
START = "2026-12-02T06:52:36-05:00 INF Traefik version 3.7.15 built on 2026-10-15T14:33:48Z version=3.7.15\n"
PRESENT = "2026-12-02T06:52:38-05:00 INF dns01: trying to solve the challenge. domain=*.example.com lib=lego\n"
CLEANUP = "2026-12-02T06:52:40-05:00 INF dns01: cleaning DNS-01 challenge. domain=*.example.com lib=lego\n"


def _plan(tmp_path: Path, **options: object) -> Plan:
    return build_plan(load(dns01_config(tmp_path / "config", 53, SECRET, **options)))  # type: ignore[arg-type]


def test_traefik_failure_in_one_line_with_when_and_next_try(tmp_path: Path) -> None:
    plan = _plan(tmp_path, wildcard=False)
    failure = attempts.last_failures(plan, START + REFUSED)[frozenset({"git.example.com"})]
    assert failure.at == datetime(2026, 12, 2, 11, 55, 33, tzinfo=UTC)
    assert failure.line() == (
        "git.example.com: dns01: error presenting token (git.example.com): dnsupdate: failed to insert: DNS update "
        "failed: server 127.0.0.1:41543 replied REFUSED for INSERT example.com."
    )
    assert failure.next_try == "when Traefik restarts or its routers change (`homelab up` after the fix)"
    rows = {r.name: r for r in _statuses(plan, START + REFUSED, [])}
    assert rows["git.example.com"].last_error == f"failed 2026-12-02 11:55 UTC: {failure.line()}"
    assert rows["git.example.com"].next_try == failure.next_try
    assert (rows["plex.example.com"].last_error, rows["plex.example.com"].next_try) == ("no certificate yet", "")


def _statuses(plan: Plan, log: str, served: list[Issued]) -> list:  # type: ignore[type-arg]
    ledger = Ledger(Path("/nonexistent/ledger.json"), [], [])
    return name_statuses(plan, Holdings(served, served), ledger, NOW, attempts.last_failures(plan, log))


def _issued(names: set[str], at: datetime) -> Issued:
    return Issued(frozenset(names), "01", at, at + timedelta(days=90), "R11", "production", "", "dns-01")


def test_a_certificate_issued_after_the_failure_hides_it(tmp_path: Path) -> None:
    plan = _plan(tmp_path, wildcard=False)
    git = {"git.example.com"}
    failed_at = datetime(2026, 12, 2, 11, 55, 33, tzinfo=UTC)
    later = [_issued(git, failed_at + timedelta(minutes=5))]  # not_before backdated: within the slack
    assert {r.name: r.last_error for r in _statuses(plan, REFUSED, later)}["git.example.com"] == ""
    earlier = [_issued(git, failed_at - timedelta(days=30))]  # its renewal failed
    assert {r.name: r.last_error for r in _statuses(plan, REFUSED, earlier)}["git.example.com"].startswith("failed")


def test_certbot_failure_and_its_next_try(tmp_path: Path) -> None:
    plan = _plan(tmp_path, edge="nginx")
    log = (
        "certbot: example.com: ordering\nRequesting a certificate for example.com and *.example.com\n"
        "certbot: example.com failed at 2026-11-27T11:00:00Z: Received response from server: REFUSED; next try in 12h\n"
        "certbot: old.example.org failed at 2026-11-27T11:00:00Z: gone; next try in 12h\n"  # no such lineage now
    )
    failures = attempts.last_failures(plan, log)
    assert list(failures) == [frozenset({"example.com", "*.example.com"})]
    rows = _statuses(plan, log, [])
    assert {r.last_error for r in rows} == {"failed 2026-11-27 11:00 UTC: Received response from server: REFUSED"}
    assert {r.next_try for r in rows} == {"2026-11-27 23:00 UTC (certbot's loop)"}


def test_a_wildcard_order_counts_for_every_name_it_serves(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    names = frozenset({"example.com", "*.example.com"})
    ledger = Ledger(tmp_path / "l.json", [], [Order(names, NOW - timedelta(days=1))])
    rows = name_statuses(plan, Holdings([], []), ledger, NOW)
    assert {r.name: r.orders_7d for r in rows} == {r.host: 1 for r in plan.routes}


def test_open_challenges_are_live_until_cleaned_or_the_edge_restarted(tmp_path: Path) -> None:
    traefik = _plan(tmp_path / "t")
    assert attempts.in_flight(traefik, START + PRESENT) == frozenset({"example.com"})
    assert attempts.in_flight(traefik, START + PRESENT + CLEANUP) == frozenset()
    assert attempts.in_flight(traefik, START + PRESENT + START) == frozenset()  # killed with the last run
    certbot = _plan(tmp_path / "c", edge="nginx")
    assert attempts.in_flight(certbot, "certbot: example.com: ordering\n") == frozenset({"example.com"})
    assert attempts.in_flight(certbot, "certbot: example.com: ordering\ncertbot: example.com: order done\n") == (
        frozenset()
    )


def test_edge_log_only_while_the_client_runs(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    engine = FakeDocker(container("homelab-edge", "traefik", id="t1"), container("homelab-edge", "x", id="x1"))
    engine.logs.update({"t1": START + PRESENT, "x1": "not the edge"})
    assert attempts.edge_log(plan, engine) == START + PRESENT
    engine.running = [container("homelab-edge", "traefik", id="t1", state="exited")]
    assert attempts.edge_log(plan, engine) == ""


def test_stale_records_need_an_rfc2136_server_that_answers(tmp_path: Path, make_plan) -> None:  # type: ignore[no-untyped-def]
    assert challenges.remove_stale(make_plan(), "", dry_run=False) == []  # the tls challenge: no records
    lines = challenges.remove_stale(_plan(tmp_path, rfc2136={"port": 9}), "", dry_run=False)
    assert len(lines) == 1
    assert lines[0].startswith(
        "certificates: cannot look for stale challenge records: 127.0.0.1:9 does not answer (Connection refused, "
    )


def test_up_removes_stale_records_before_it_applies(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    calls: list[tuple[str, bool]] = []

    def remove_stale(plan: Plan, edge_log: str, *, dry_run: bool) -> list[str]:
        calls.append((edge_log, dry_run))
        return ["certificates: removed 1 challenge TXT record at _acme-challenge.example.com, left by a failed order"]

    engine = FakeDocker(container("homelab-edge", "traefik", id="t1"))
    engine.logs["t1"] = START
    monkeypatch.setattr("homelab.runtime.docker.Docker", lambda: engine)
    monkeypatch.setattr(challenges, "remove_stale", remove_stale)
    config = dns01_config(tmp_path / "config", 53, SECRET)
    result = CliRunner().invoke(app, ["up", "--dry-run", "--config", str(config), "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0] == (
        "certificates: removed 1 challenge TXT record at _acme-challenge.example.com, left by a failed order"
    )
    assert calls == [(START, True)]
