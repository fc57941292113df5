"""The rate-limit guard: before `up` lets the edge order production certificates, count the orders of
the last week (ledger + what the edge holds) against budgets kept under Let's Encrypt's published
limits, and refuse - with Let's Encrypt's own wording and the date it may try again - when one more
order would go past a budget. Source: https://letsencrypt.org/docs/rate-limits/ (updated June 2025).

Only production Let's Encrypt is guarded: staging and test CAs have their own, far higher limits.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from homelab.certs.ledger import Ledger, Order, ledger_path, load_ledger
from homelab.certs.policy import ca_server, name_sets, staging_server
from homelab.certs.staging import with_stages
from homelab.certs.store import Holdings, Reader, ca_kind_of_url, read_here, read_holdings
from homelab.errors import NodeDown, Refused
from homelab.plan_model import Plan

# A request whose certificate has not appeared by then is counted as a failed validation.
ISSUE_SLACK = timedelta(hours=2)  # Let's Encrypt backdates notBefore by one hour


@dataclass(frozen=True)
class Limit:
    name: str  # Let's Encrypt's name for the limit
    published: int
    window: timedelta
    budget: int  # what homelab lets itself use: the rest is for a hand-run recovery
    error: str  # the message Let's Encrypt answers with past the limit


PER_DOMAIN = Limit(
    "New Certificates per Registered Domain", 50, timedelta(days=7), 40, "too many certificates already issued"
)
PER_NAME_SET = Limit(
    "New Certificates per Exact Set of Identifiers",
    5,
    timedelta(days=7),
    4,
    "too many certificates already issued for exact set of identifiers",
)
PER_ACCOUNT = Limit("New Orders per Account", 300, timedelta(hours=3), 240, "too many new orders recently")
FAILURES = Limit(
    "Authorization Failures per Identifier per Account", 5, timedelta(hours=1), 3, "too many failed authorizations"
)


@dataclass(frozen=True)
class Decision:
    """What `up` is about to let the edge order, and why not when it must not."""

    guarded: bool  # False when the CA is not production Let's Encrypt
    orders: list[frozenset[str]]
    refusals: list[str]
    unread: str = ""  # why the store could not be read (its node is down), when it could not


def needed_orders(plan: Plan, holdings: Holdings, now: datetime) -> list[frozenset[str]]:
    """The name sets the edge will order from production: each certificate (one per served name, or the
    wildcard's one) that has no unexpired production certificate yet. Traefik with staging first orders
    from production only the sets past staging (plan.production_ready; certs/switch.py asks the guard
    again for those it promotes); certbot asks production right after its staging dry run."""
    current = [c for c in holdings.served if c.ca == "production" and c.not_after > now]
    missing = [names for names in name_sets(plan) if not any(all(c.covers(n) for n in names) for c in current)]
    if plan.config.edge.kind == "traefik" and staging_server(plan):
        return [names for names in missing if names in plan.production_ready]
    return missing


def decide(plan: Plan, holdings: Holdings, ledger: Ledger, now: datetime) -> Decision:
    if ca_kind_of_url(ca_server(plan)) != "production":
        return Decision(False, [], [])
    ledger.record_issued(holdings.history)
    orders = needed_orders(plan, holdings, now)
    issued, failed = split_orders(ledger)
    events = issued + failed
    refusals = []
    domain = plan.config.domain.name
    in_domain = [o.at for o in events if all(_under(n, domain) for n in o.names)]
    refusals += _over(PER_DOMAIN, in_domain, len(orders), now, f"registered domain {domain}")
    refusals += _over(PER_ACCOUNT, [o.at for o in events], len(orders), now, "this account")
    for names in orders:
        label = ",".join(sorted(names))
        refusals += _over(PER_NAME_SET, [o.at for o in events if o.names == names], 1, now, f"names {label}")
        for name in sorted(names):
            tries = [o.at for o in failed if name in o.names]
            refusals += _over(FAILURES, tries, 1, now, f"name {name}")
    return Decision(True, orders, refusals)


def _under(name: str, domain: str) -> bool:
    return name == domain or name.endswith("." + domain)


def split_orders(ledger: Ledger) -> tuple[list[Order], list[Order]]:
    """Issued certificates, and the requests no certificate answered: pending or failed. A certificate
    answers the oldest request for its exact names made before it was issued."""
    open_requests = sorted(ledger.requested, key=lambda o: o.at)
    for cert in ledger.issued:
        match = next(
            (r for r in open_requests if r.names == cert.names and r.at <= cert.at + ISSUE_SLACK),
            None,
        )
        if match is not None:
            open_requests.remove(match)
    return list(ledger.issued), open_requests


def _over(limit: Limit, times: list[datetime], adding: int, now: datetime, scope: str) -> list[str]:
    recent = sorted(t for t in times if now - t < limit.window)
    if not adding:
        return []  # nothing new is ordered: renewals and restarts are the edge's own business
    excess = len(recent) + adding - limit.budget
    if excess <= 0:
        return []
    if excess > len(recent):
        retry = "never: this many at once is more than the budget; split the change over several weeks"
    else:
        retry = (recent[excess - 1] + limit.window).astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return [
        f"{scope}: {len(recent)} in the last {_span(limit.window)} + {adding} now would pass homelab's budget of "
        f"{limit.budget} under Let's Encrypt's '{limit.name}' limit ({limit.published} per {_span(limit.window)}; "
        f'past it Let\'s Encrypt answers "{limit.error}"); try again after {retry}'
    ]


def _span(window: timedelta) -> str:
    hours = window.seconds // 3600
    return f"{window.days} days" if window.days else ("hour" if hours == 1 else f"{hours} hours")


def enforce(plan: Plan, *, dry_run: bool, now: datetime | None = None, read: Reader = read_here) -> Decision:
    """`up`'s guard: refuse (exit 5, nothing changed) past a budget; otherwise, unless `dry_run`,
    record the orders the edge is about to make."""
    now = now or datetime.now(UTC)
    if ca_kind_of_url(ca_server(plan)) != "production":
        return Decision(False, [], [])
    try:
        holdings = read_holdings(plan, read)
    except NodeDown as exc:
        # the edge cannot run on that node, so it orders nothing until it is back; up's health gate
        # names the node, and the next `up` counts again
        return Decision(False, [], [], unread=str(exc))
    ledger = load_ledger(ledger_path(plan))
    decision = decide(with_stages(plan), holdings, ledger, now)
    if decision.refusals:
        raise Refused(
            "certificate rate-limit guard: not starting the edge with names it would order now:\n  "
            + "\n  ".join(decision.refusals)
        )
    if not dry_run:
        ledger.record_requested(decision.orders, now)
        ledger.prune(now)
        ledger.save()
    return decision
