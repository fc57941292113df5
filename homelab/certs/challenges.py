"""Challenge TXT records a failed order left behind: an order the DNS server went away during (its cleanup
failed too), or one the edge was killed in. `up` removes them from the RFC 2136 server before it applies;
the records of an order the edge's log shows in progress are its live ones and stay. What cannot be
removed is reported, with why."""

from __future__ import annotations

import dns.exception

from homelab.certs import attempts, dns_update
from homelab.checks import Check
from homelab.plan_model import Plan

TIMEOUT = 5.0


def remove_stale(plan: Plan, edge_log: str, *, dry_run: bool, timeout: float = TIMEOUT) -> list[str]:
    """`up`'s lines about stale challenge records; removes them unless `dry_run`. `edge_log`: the edge's
    log (attempts.edge_log), "" when it is not running."""
    acme = plan.config.domain.acme
    if acme.challenge != "dns" or acme.rfc2136 is None:
        return []
    server = dns_update.connect(plan, acme.rfc2136, min(timeout, dns_update.DOWN_BUDGET))
    if isinstance(server, Check):
        return [f"certificates: cannot look for stale challenge records: {server.detail}"]
    live = attempts.in_flight(plan, edge_log)
    lines = []
    for name in dns_update.challenge_names(plan):
        if name.removeprefix(f"{dns_update.CHALLENGE_LABEL}.") not in live:  # else the edge answers there now
            line = _remove(server, name, dry_run=dry_run)
            lines += [line] if line else []
    return lines


def _remove(server: dns_update.Server, name: str, *, dry_run: bool) -> str | None:
    try:
        values = server.txt(name)
        if not values:
            return None
        what = f"{len(values)} challenge TXT record{'s' if len(values) > 1 else ''} at {name}"
        if dry_run:
            return f"certificates: would remove {what}, left by a failed order"
        rcode = server.update(dns_update.find_zone(server, name), name, None)
    except dns_update.Refused as exc:
        return f"certificates: cannot remove the challenge records at {name}: {exc}"
    except (dns.exception.DNSException, OSError) as exc:
        return f"certificates: cannot remove the challenge records at {name} ({dns_update.reason(exc)})"
    if rcode != "NOERROR":
        return f"certificates: {what} left by a failed order; removing them answered {rcode}: see the server's log"
    return f"certificates: removed {what}, left by a failed order"
