"""Staging first: a name set homelab holds no certificate for is first issued by the staging CA, and only
once staging issued it is production asked. Staging's limits are far above production's, so a broken
set-up (closed port, wrong DNS credentials, a CAA record) burns staging attempts, never production ones.

certbot does it in one run (certbot.sh.j2: `--dry-run` against staging, then the real order). Traefik has
two resolvers sharing acme.json and each router names one (homelab.certs.policy.resolver_for, the switch), from
the sets this module finds past staging. A certificate Traefik holds for a name stops any other resolver
from ordering it (traefik/traefik#8633), so the staging certificate must leave acme.json, with Traefik
stopped, before production can be asked: promote() does that, and notes the set in the ledger (per
production CA: pointing ca_server elsewhere means staging again).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from homelab.certs.attempts import traefik_failures
from homelab.certs.ledger import Ledger, ledger_path, load_ledger
from homelab.certs.policy import RESOLVER, STAGING_RESOLVER, ca_server, name_sets, staging_server
from homelab.certs.store import Issued, read_resolvers
from homelab.engine.host import acme_json_path
from homelab.ownership import write_atomic
from homelab.plan_model import Plan


def _covered(names: frozenset[str], held: list[Issued]) -> bool:
    return any(all(c.covers(n) for n in names) for c in held)


def production_ready(plan: Plan, held: dict[str, list[Issued]], ledger: Ledger) -> frozenset[frozenset[str]]:
    """The name sets the production resolver may order (or holds): production holds them, or staging
    issued them and they were promoted for this production CA. A set whose staging certificate is
    still in acme.json is not: Traefik would keep serving it and never order (promote() first)."""
    promoted = {s.names for s in ledger.staged if s.ca == ca_server(plan)}
    return frozenset(n for n in name_sets(plan) if n in promoted or _covered(n, held.get(RESOLVER, [])))


def with_stages(plan: Plan) -> Plan:
    """The plan with the sets past staging, from the edge's acme.json and the ledger (Traefik only),
    added to those it has."""
    path = acme_json_path(plan)
    if plan.config.edge.kind != "traefik" or path is None:
        return plan
    ready = production_ready(plan, read_resolvers(path), load_ledger(ledger_path(plan)))
    return dataclasses.replace(plan, production_ready=plan.production_ready | ready)


def promote(plan: Plan, path: Path, now: datetime | None = None) -> list[frozenset[str]]:
    """With Traefik stopped: note in the ledger the sets staging issued and production does not hold,
    then drop their staging certificates from acme.json so the production resolver orders them on the
    next start. The staging account stays (a new name set reuses it). Returns the sets promoted;
    writes nothing without any."""
    held = read_resolvers(path)
    staged = held.get(STAGING_RESOLVER, [])
    production = held.get(RESOLVER, [])
    ready = [n for n in name_sets(plan) if _covered(n, staged) and not _covered(n, production)]
    if not ready:
        return []
    ledger = load_ledger(ledger_path(plan))
    ledger.record_staged(ready, ca_server(plan), now or datetime.now(UTC))
    ledger.save()  # first: a crash between the two writes leaves the set staged, not lost
    data = json.loads(path.read_text(encoding="utf-8"))
    entries = data[STAGING_RESOLVER].get("Certificates") or []
    drop = {c.serial for c in staged if any(_covered(n, [c]) for n in ready)}
    data[STAGING_RESOLVER]["Certificates"] = [e for e, c in zip(entries, staged, strict=True) if c.serial not in drop]
    write_atomic(path, json.dumps(data, indent=2).encode(), 0o600)
    return ready


POLL_SECONDS = 2.0


@dataclass
class Outcome:
    """Where staging stands for the sets not yet past it."""

    ready: list[frozenset[str]] = field(default_factory=list)  # staging issued them
    failed: dict[frozenset[str], str] = field(default_factory=dict)  # Traefik's error
    waiting: list[frozenset[str]] = field(default_factory=list)  # no answer yet


def staging_failures(log: str) -> dict[frozenset[str], str]:
    """The staging orders Traefik's log says failed, with the CA's error (the last one per set)."""
    return {f.names: f.error for f in traefik_failures(log) if f.resolver == STAGING_RESOLVER}


def await_staging(
    plan: Plan,
    edge_log: Callable[[], str],
    timeout: float,
    *,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> Outcome:
    """Watch acme.json and the edge's log until staging issued or refused every set not past it, for
    at most `timeout` s. When the edge's log does not name the staging resolver (not this plan's
    Traefik, not running, or started long ago) only what acme.json holds counts: no waiting."""
    path = acme_json_path(plan)
    pending = [n for n in name_sets(plan) if n not in plan.production_ready]
    if staging_server(plan) is None or path is None or not pending:
        return Outcome()
    deadline = clock() + timeout
    while True:
        staged = read_resolvers(path).get(STAGING_RESOLVER, [])
        log = edge_log()
        failures = staging_failures(log)
        outcome = Outcome()
        for names in pending:
            if _covered(names, staged):
                outcome.ready.append(names)
            elif names in failures:
                outcome.failed[names] = failures[names]
            else:
                outcome.waiting.append(names)
        if STAGING_RESOLVER not in log:
            return Outcome(ready=outcome.ready)
        if not outcome.waiting or clock() >= deadline:
            return outcome
        sleep(POLL_SECONDS)
