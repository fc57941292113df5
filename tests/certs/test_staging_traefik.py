"""Staging first and DNS-01 with the REAL Traefik: the rendered static config (two resolvers, challenge
dns through lego's rfc2136 provider, wildcard) and the rendered routers (the switch), Pebble x2 as staging
and production, a real BIND named taking the TXT updates.

1. First start: every router names the staging resolver; Traefik gets the wildcard certificate from the
   staging Pebble only. Traefik stops; promote() notes the set and drops the staging certificate; the
   routers rendered again name production; on the next start Traefik gets it from production, serves it,
   and the switch stays on production.
2. When staging cannot validate (its Pebble asks a DNS server without the TXT record), production issues
   nothing: its resolver is never named.
The TSIG secret reaches Traefik as a file (RFC2136_TSIG_SECRET_FILE), never in its config or log.

Changed for the test: loopback entry points, the storage under tmp, the two Pebbles as CAs (trusted through
LEGO_CA_CERTIFICATES), routes from the rendered labels through a file provider. The DNS challenge's
settings (resolvers, propagation, the wait between the apex's and the wildcard's TXT records) as rendered.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from cryptography import x509

from homelab.certs import staging
from homelab.certs.ledger import ledger_path, load_ledger
from homelab.certs.policy import RESOLVER, STAGING_RESOLVER, rfc2136_env
from homelab.certs.store import UnreadableStore, read_resolvers
from homelab.config.loader import load
from homelab.engine.host import acme_json_path
from homelab.plan import build_plan
from homelab.plan_model import Plan
from homelab.render.edge_traefik import dynamic_config, static_config
from tests.certs.conftest import dns01_config
from tests.certs.edges_native import traefik_routes as routes
from tests.certs.named import Named, named
from tests.certs.pebbles import Ca, staging_and_production
from tests.contract.edge_support import (
    running,
    served_certificate,
    traefik_static_for_test,
    wait_until,
)

pytestmark = pytest.mark.real
ISSUE_SECONDS = 90.0
WILDCARD = frozenset({"example.com", "*.example.com"})


@pytest.fixture
def server(tmp_path: Path, require_program: Callable[[str], str]) -> Iterator[Named]:
    with named(require_program("named"), tmp_path / "named") as running_named:
        yield running_named


class Edge:
    def __init__(self, tmp_path: Path, server: Named, staging_ca: Ca, production: Ca, traefik: str) -> None:
        config = dns01_config(
            tmp_path / "config", server.port, server.secret,
            ca_server=production.directory, staging_ca_server=staging_ca.directory,
        )  # fmt: skip
        self.plan = build_plan(load(config))
        self.dir = tmp_path / "edge"
        (self.dir / "dynamic").mkdir(parents=True)
        static, self.ports = traefik_static_for_test(static_config(self.plan), self.dir)
        resolvers = static["certificatesResolvers"]
        assert set(resolvers) == {RESOLVER, STAGING_RESOLVER}
        acme = acme_json_path(self.plan)  # where homelab reads it: the edge/acme dataset (in tmp)
        assert acme is not None
        acme.parent.mkdir(parents=True)
        self.acme = acme
        for resolver in resolvers.values():
            resolver["acme"]["storage"] = str(acme)
        resolvers[RESOLVER]["acme"]["caServer"] = production.directory
        resolvers[STAGING_RESOLVER]["acme"]["caServer"] = staging_ca.directory
        for resolver in resolvers.values():
            challenge = resolver["acme"]["dnsChallenge"]
            assert challenge["provider"] == "rfc2136"
            assert challenge["resolvers"] == [server.address]  # as rendered: lego asks named
        self.static = self.dir / "traefik.yml"
        self.static.write_text(yaml.safe_dump(static, sort_keys=False))
        rfc2136 = self.plan.config.domain.acme.rfc2136
        assert rfc2136 is not None
        env = {
            **rfc2136_env(rfc2136),
            "RFC2136_TSIG_SECRET_FILE": str(server.secret_file),
            "LEGO_CA_CERTIFICATES": f"{staging_ca.api_cert}:{production.api_cert}",
        }
        self.argv = ["/usr/bin/env", *[f"{k}={v}" for k, v in env.items()], traefik, f"--configFile={self.static}"]
        self.work = tmp_path
        self.starts = 0

    def route(self, plan: Plan) -> None:
        (self.dir / "dynamic" / "dynamic.yml").write_text(yaml.safe_dump(dynamic_config(plan)))
        (self.dir / "dynamic" / "routes.yml").write_text(yaml.safe_dump(routes(plan)))

    def held(self, resolver: str) -> list[frozenset[str]]:
        try:
            return [c.names for c in read_resolvers(self.acme).get(resolver, [])]
        except UnreadableStore:
            return []  # Traefik is writing it

    def served(self, host: str) -> x509.Certificate:
        return served_certificate(self.ports["websecure"], host, timeout=5)

    def log(self) -> Path:
        self.starts += 1
        return self.work / f"traefik-{self.starts}.log"


def test_staging_then_production_wildcard_over_rfc2136(
    tmp_path: Path, server: Named, require_program: Callable[[str], str]
) -> None:
    traefik = require_program("traefik")
    with staging_and_production(require_program, tmp_path / "pebbles", server.address) as (staging_ca, production):
        edge = Edge(tmp_path, server, staging_ca, production, traefik)
        plan = staging.with_stages(edge.plan)
        assert plan.production_ready == frozenset()
        edge.route(plan)
        assert {r["tls"]["certResolver"] for r in routes(plan)["http"]["routers"].values()} == {STAGING_RESOLVER}

        # 1. staging: Traefik orders the wildcard set from the staging Pebble only
        log = edge.log()
        with running(edge.argv, log, tmp_path) as process:
            wait_until(lambda: WILDCARD in edge.held(STAGING_RESOLVER), "the staging certificate", process, log,
                       ISSUE_SECONDS)  # fmt: skip
            served = "Traefik to serve the staging certificate"
            wait_until(lambda: edge.served("cloud.example.com").issuer == staging_ca.intermediate, served, process, log)
        assert (staging_ca.issued(), production.issued()) == (1, 0)
        assert edge.held(RESOLVER) == []
        # what `up` reads (homelab/certs/switch.py): staging issued the set, it is not past staging yet
        assert staging.await_staging(plan, log.read_text, 0).ready == [WILDCARD]
        assert staging.with_stages(edge.plan).production_ready == frozenset()

        # 2. the switch: promoted with Traefik stopped, then production
        assert staging.promote(edge.plan, edge.acme) == [WILDCARD]
        assert edge.held(STAGING_RESOLVER) == []
        assert edge.acme.stat().st_mode & 0o777 == 0o600
        assert [s.names for s in load_ledger(ledger_path(edge.plan)).staged] == [WILDCARD]
        assert staging.promote(edge.plan, edge.acme) == []  # nothing left to promote
        plan = staging.with_stages(edge.plan)
        assert plan.production_ready == frozenset({WILDCARD})
        edge.route(plan)
        assert {r["tls"]["certResolver"] for r in routes(plan)["http"]["routers"].values()} == {RESOLVER}
        log = edge.log()
        with running(edge.argv, log, tmp_path) as process:
            wait_until(lambda: WILDCARD in edge.held(RESOLVER), "the production certificate", process, log,
                       ISSUE_SECONDS)  # fmt: skip
            for host in ("cloud.example.com", "git.example.com"):
                wait_until(lambda host=host: edge.served(host).issuer == production.intermediate,
                           f"Traefik to serve {host} from production", process, log)  # fmt: skip
        assert (staging_ca.issued(), production.issued()) == (1, 1)
        assert staging.with_stages(edge.plan).production_ready == frozenset({WILDCARD})

    for path in [
        edge.static,
        tmp_path / "traefik-1.log",
        tmp_path / "traefik-2.log",
        edge.dir / "dynamic" / "routes.yml",
    ]:
        assert server.secret not in path.read_text(errors="replace"), path


def test_staging_failure_never_reaches_production(
    tmp_path: Path, server: Named, require_program: Callable[[str], str]
) -> None:
    traefik = require_program("traefik")
    pebbles = staging_and_production(require_program, tmp_path / "pebbles", server.address, staging_fails=True)
    with pebbles as (staging_ca, production):
        edge = Edge(tmp_path, server, staging_ca, production, traefik)
        edge.route(staging.with_stages(edge.plan))
        log = edge.log()
        with running(edge.argv, log, tmp_path) as process:
            wait_until(lambda: "Unable to obtain ACME certificate" in log.read_text(), "staging to fail", process, log,
                       ISSUE_SECONDS)  # fmt: skip
        outcome = staging.await_staging(staging.with_stages(edge.plan), log.read_text, 0)
        assert list(outcome.failed) == [WILDCARD] and outcome.ready == outcome.waiting == []
        assert "No TXT records found for DNS challenge" in outcome.failed[WILDCARD]
        assert (staging_ca.issued(), production.issued()) == (0, 0)
        assert edge.held(RESOLVER) == [] and edge.held(STAGING_RESOLVER) == []
        assert staging.promote(edge.plan, edge.acme) == []
        assert staging.with_stages(edge.plan).production_ready == frozenset()  # the switch stays on staging
