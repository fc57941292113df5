"""`homelab certs`: per served name, what the edge holds for it and what happened to it lately."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime, timedelta

from homelab.certs import guard
from homelab.certs.attempts import Failure, last_failures
from homelab.certs.ledger import Ledger, Order, ledger_path, load_ledger
from homelab.certs.policy import ca_server, certificate_names, staging_server
from homelab.certs.store import CHALLENGE_NAMES, Holdings, Issued, Reader, ca_kind_of_url, read_here, read_holdings
from homelab.checks import Check, Level
from homelab.errors import HomelabError
from homelab.plan_model import Plan

WEEK = timedelta(days=7)


@dataclass(frozen=True)
class NameStatus:
    name: str
    issuer: str  # the issuer's name, "" when nothing is served yet
    ca: str  # production, staging, test, other, or "" when nothing is served
    expires: str  # ISO 8601, "" when nothing is served
    days_left: int | None
    challenge: str
    last_error: str
    orders_7d: int  # orders of a certificate serving the name (a wildcard's count for each name it serves)
    next_try: str  # when the edge orders again after its last failure, "" without one

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def name_statuses(
    plan: Plan,
    holdings: Holdings,
    ledger: Ledger,
    now: datetime,
    failures: dict[frozenset[str], Failure] | None = None,
) -> list[NameStatus]:
    """`failures`: the edge's last failed order per name set (homelab/certs/attempts.py)."""
    expected = ca_kind_of_url(ca_server(plan))
    ledger.record_issued(holdings.history)
    issued, unanswered = guard.split_orders(ledger)
    seen = {o.serial for o in issued}
    history = issued + [Order.of(c) for c in holdings.history if c.serial not in seen]
    staging_first = staging_server(plan) is not None
    default_challenge = CHALLENGE_NAMES[plan.config.domain.acme.challenge]
    rows = []
    for route in plan.routes:
        host = route.host
        cert = _served(holdings.served, host)
        pending = [o.at for o in unanswered if _serves(o.names, host)]
        orders = [o for o in history if _serves(o.names, host) and now - o.at < WEEK]
        failure = _failure(cert, (failures or {}).get(certificate_names(plan, host)))
        problem = _failed(failure) if failure else _problem(cert, expected, pending, now, staging_first=staging_first)
        count = len(orders) + len([t for t in pending if now - t < WEEK])
        row = NameStatus(host, "", "", "", None, default_challenge, problem, count, failure.next_try if failure else "")
        if cert:
            days = (cert.not_after - now).days
            row = replace(row, issuer=cert.issuer, ca=cert.ca, expires=cert.not_after.isoformat(), days_left=days)
            row = replace(row, challenge=cert.challenge or default_challenge)
        rows.append(row)
    return rows


def _serves(names: frozenset[str], host: str) -> bool:
    """An order for `names` serves `host`: the name itself, or a wildcard one label up."""
    return host in names or "*." + host.partition(".")[2] in names


def _failure(cert: Issued | None, failure: Failure | None) -> Failure | None:
    """The failure, unless the certificate served was issued after it (not_before is backdated up to an
    hour: a failure counts only when later than that slack)."""
    if failure is None or cert is None or failure.at is None:
        return failure
    return failure if failure.at > cert.not_before + guard.ISSUE_SLACK else None


def _failed(failure: Failure) -> str:
    when = f"{failure.at:%Y-%m-%d %H:%M} UTC" if failure.at else "lately"
    return f"failed {when}: {failure.line()}"


def _served(served: list[Issued], host: str) -> Issued | None:
    matching = [c for c in served if c.covers(host)]
    return max(matching, key=lambda c: c.not_after) if matching else None


STAGED = "staging issued it; the next `homelab up` asks production"


def _problem(cert: Issued | None, expected: str, pending: list[datetime], now: datetime, *, staging_first: bool) -> str:
    stale = [t for t in pending if now - t > guard.ISSUE_SLACK]
    if stale:
        since = max(stale).astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
        return f"ordered {since}, no certificate since: see `homelab logs` of the edge and `homelab certs check`"
    if cert is None:
        return "no certificate yet" + (" (ordering)" if pending else "")
    if cert.not_after <= now:
        return "expired: renewal failed; run `homelab certs check`"
    if staging_first and expected == "production" and cert.ca == "staging":
        return STAGED  # staging first, between staging's certificate and the switch (certs/staging.py)
    if expected in ("production", "staging") and cert.ca != expected:
        return f"served by a {cert.ca} CA while {expected} Let's Encrypt is configured"
    return ""


def statuses(plan: Plan, now: datetime | None = None, edge_log: str = "", read: Reader = read_here) -> list[NameStatus]:
    """Reads the edge's store (where the edge runs: `read`), the ledger and `edge_log` (the edge's log,
    attempts.edge_log()); writes nothing."""
    holdings, ledger = read_holdings(plan, read), load_ledger(ledger_path(plan))
    return name_statuses(plan, holdings, ledger, now or datetime.now(UTC), last_failures(plan, edge_log))


def held_checks(plan: Plan, now: datetime | None = None, read: Reader = read_here) -> list[Check]:
    """For `doctor`: a name whose certificate expired or whose order went unanswered fails; a name
    with no certificate yet warns; a store homelab cannot read fails."""
    try:
        rows = statuses(plan, now, read=read)
    except HomelabError as exc:
        return [Check("fail", "certificates", str(exc))]
    out = []
    for row in rows:
        if not row.last_error:
            out.append(Check("ok", f"{row.name} certificate", f"{row.ca}, {row.days_left} days left"))
        else:
            waiting = row.last_error.startswith("no certificate yet") or row.last_error == STAGED
            level: Level = "warn" if waiting else "fail"
            out.append(Check(level, f"{row.name} certificate", row.last_error))
    return out
