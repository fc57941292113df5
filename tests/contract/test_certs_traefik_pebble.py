"""Contract: `homelab certs` reads the acme.json the REAL Traefik wrote with the rendered static config,
its certificates issued by Pebble (an ACME test CA) over a real HTTP-01 validation on Traefik's web
entry point. Changed for the test: loopback entry points, storage in tmp, Pebble as the CA (trusted
through LEGO_CA_CERTIFICATES), and the routes from the rendered labels through a file provider."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from homelab.certs.ledger import Ledger
from homelab.certs.name_status import name_statuses
from homelab.certs.store import UnreadableStore, read_acme_json
from homelab.config.loader import load
from homelab.plan import build_plan
from homelab.render.edge_traefik import route_labels, static_config
from tests.contract.edge_support import free_port, labels_to_dynamic, running, traefik_static_for_test, wait_until
from tests.contract.test_edge_nginx_certbot import pebble, pebble_plan

pytestmark = pytest.mark.real
ISSUE_SECONDS = 90.0


def _plan(folder: Path, directory: str):  # type: ignore[no-untyped-def]
    """The certbot contract's Pebble config (HTTP-01, Pebble as the CA), with the Traefik edge."""
    pebble_plan(folder, directory)
    config = folder / "homelab.yaml"
    config.write_text(config.read_text(encoding="utf-8").replace("kind: nginx", "kind: traefik"), encoding="utf-8")
    return build_plan(load(config))


def test_traefik_acme_json_from_pebble(tmp_path: Path, require_program: Callable[[str], str]) -> None:
    programs = {name: require_program(name) for name in ("openssl", "pebble", "pebble-challtestsrv", "traefik")}
    api, mgmt = free_port(), free_port()
    directory = f"https://127.0.0.1:{api}/dir"
    plan = _plan(tmp_path / "example", directory)
    hosts = [r.host for r in plan.routes]
    edge = tmp_path / "edge"
    (edge / "dynamic").mkdir(parents=True)
    static, ports = traefik_static_for_test(static_config(plan), edge)
    static["certificatesResolvers"]["le"]["acme"]["caServer"] = directory
    (edge / "traefik.yml").write_text(yaml.safe_dump(static, sort_keys=False))
    labels: dict[str, str] = {}
    for route in plan.routes:
        labels.update(route_labels(plan, route))
    backends = {r.app: f"http://127.0.0.1:{free_port()}" for r in plan.routes}  # never reached
    (edge / "dynamic" / "routes.yml").write_text(yaml.safe_dump(labels_to_dynamic(labels, backends)))
    acme_json = edge / "acme.json"

    def issued() -> bool:
        try:
            held = read_acme_json(acme_json, "http-01").served
        except UnreadableStore:
            return False  # Traefik is writing it
        return {n for c in held for n in c.names} >= set(hosts)

    (tmp_path / "pebble").mkdir()
    with pebble(programs, tmp_path / "pebble", api, mgmt, ports["web"]):
        env = f"LEGO_CA_CERTIFICATES={tmp_path / 'pebble' / 'pebble.pem'}"
        argv = ["/usr/bin/env", env, programs["traefik"], f"--configFile={edge / 'traefik.yml'}"]
        log = tmp_path / "traefik.log"
        with running(argv, log, tmp_path) as traefik:
            wait_until(issued, "Traefik to store a certificate per name", traefik, log, timeout=ISSUE_SECONDS)

    assert acme_json.stat().st_mode & 0o777 == 0o600
    holdings = read_acme_json(acme_json, "http-01")
    assert sorted(n for c in holdings.served for n in c.names) == sorted(hosts)
    now = datetime.now(UTC)
    for row in name_statuses(plan, holdings, Ledger(tmp_path / "l.json", [], []), now):
        assert row.issuer.startswith("Pebble Intermediate CA"), row
        assert (row.ca, row.challenge, row.last_error) == ("test", "http-01", ""), row
        assert row.days_left is not None and row.days_left > 0
        assert row.orders_7d == 1
