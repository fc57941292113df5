"""Staging first: a name set homelab holds no certificate for is first issued by the staging CA, and only
once staging issued it is production asked. Staging's limits are far above production's, so a broken
set-up (closed port, wrong DNS credentials, a CAA record) burns staging attempts, never production ones.

certbot does it in one run (certbot.sh.j2: `--dry-run` against staging, then the real order). Traefik has
two resolvers sharing acme.json and each router names one (edge_traefik.resolver_for, the switch), from
the sets this module finds past staging. A certificate Traefik holds for a name stops any other resolver
from ordering it (traefik/traefik#8633), so the staging certificate must leave acme.json, with Traefik
stopped, before production can be asked: promote() does that, and notes the set in the ledger (per
production CA: another CA or a new account URL means staging again).
"""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from pathlib import Path

from homelab.certs.ledger import Ledger, ledger_path, load_ledger
from homelab.certs.store import Issued, read_resolvers
from homelab.host import acme_json_path
from homelab.ownership import write_atomic
from homelab.plan import Plan
from homelab.render.edge_traefik import RESOLVER, STAGING_RESOLVER, ca_server, name_sets


def _covered(names: frozenset[str], held: list[Issued]) -> bool:
    return any(all(c.covers(n) for n in names) for c in held)


def production_ready(plan: Plan, held: dict[str, list[Issued]], ledger: Ledger) -> frozenset[frozenset[str]]:
    """The name sets the production resolver may order (or holds): production holds them, or staging
    issued them (its certificate still in acme.json, or promoted for this production CA)."""
    past = held.get(RESOLVER, []) + held.get(STAGING_RESOLVER, [])
    promoted = {s.names for s in ledger.staged if s.ca == ca_server(plan)}
    return frozenset(n for n in name_sets(plan) if n in promoted or _covered(n, past))


def with_stages(plan: Plan) -> Plan:
    """The plan with the sets past staging, from the edge's acme.json and the ledger (Traefik only)."""
    path = acme_json_path(plan)
    if plan.config.edge.kind != "traefik" or path is None:
        return plan
    ready = production_ready(plan, read_resolvers(path), load_ledger(ledger_path(plan)))
    return dataclasses.replace(plan, production_ready=ready)


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
