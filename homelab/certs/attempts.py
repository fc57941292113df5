"""The edge's failed certificate orders, read from its log, for `homelab certs` and staging first: per name
set the last failure, when it happened and when the edge tries again. Traefik logs one line per failed
order and retries only when it restarts or its routers change; certbot.sh (certbot.sh.j2) logs one line
per failed run and retries on its loop."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from homelab.certs.policy import name_sets
from homelab.layout import EDGE_STACK, project_name
from homelab.plan_model import Plan

if TYPE_CHECKING:  # the driver (threads, subprocess) only for `homelab certs`: render reads no log
    from homelab.runtime.docker import Engine

LOG_LINES = 2000  # the edge's log since it started: a few lines per order

# Traefik's line for a failed order, e.g. `2026-12-02T06:55:33-05:00 ERR Unable to obtain ACME certificate
# for domains error="..." ... domains=["git.example.com"] providerName=le.acme routerName=...` (seen from
# Traefik 3.7.15 in tests/certs/test_attempts_real.py; the console format colours it, TTY or not)
_TRAEFIK = re.compile(
    r'^(?:(?P<at>\S+) )?ERR Unable to obtain ACME certificate for domains error="(?P<error>(?:[^"\\]|\\.)*)".*?'
    r"domains=\[(?P<names>[^\]]*)\] providerName=(?P<resolver>[\w.-]+)\.acme",
    re.MULTILINE,
)
# certbot.sh's line for a failed run (certbot.sh.j2's attempt())
_CERTBOT = re.compile(
    r"^certbot: (?P<name>\S+) failed at (?P<at>\S+): (?P<error>.*); next try in (?P<interval>\d+[smhd]?)$",
    re.MULTILINE,
)
# lego's lines around one challenge (Traefik logs them at INFO), and certbot.sh's around one run
_PRESENT = re.compile(r"dns01: trying to solve the challenge\. domain=(?P<domain>\S+)")
_CLEANUP = re.compile(r"dns01: cleaning DNS-01 challenge\. domain=(?P<domain>\S+)")
_CERTBOT_RUN = re.compile(r"^certbot: (?P<name>\S+)(?P<end>: ordering| failed at |: order done)", re.MULTILINE)
TRAEFIK_START = "INF Traefik version "
_COLOURS = re.compile(r"\x1b\[[0-9;]*m")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
TRAEFIK_NEXT_TRY = "when Traefik restarts or its routers change (`homelab up` after the fix)"


@dataclass(frozen=True)
class Failure:
    names: frozenset[str]  # the certificate's name set
    at: datetime | None  # None when the log line had no readable time
    error: str  # the client's words
    resolver: str  # Traefik's resolver ("" for certbot)
    next_try: str

    def line(self) -> str:
        """The error on one line, without the client's wrapping around it."""
        text = re.sub(r"^unable to generate a certificate for the domains \[[^\]]*\]: ", "", self.error)
        text = text.replace("resolver: one or more domains had a problem: [", "").removesuffix("]")
        return " ".join(text.split())


def _time(text: str | None) -> datetime | None:
    if text is None:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)
    except ValueError:
        return None


def traefik_failures(log: str) -> list[Failure]:
    out = []
    for match in _TRAEFIK.finditer(_COLOURS.sub("", log)):
        names = frozenset(json.loads(f"[{match['names']}]"))
        error = match["error"].replace('\\"', '"')
        out.append(Failure(names, _time(match["at"]), error, match["resolver"], TRAEFIK_NEXT_TRY))
    return out


def certbot_failures(plan: Plan, log: str) -> list[Failure]:
    lineages = {min(names, key=len): names for names in name_sets(plan)}  # certbot.sh's lineage names
    out = []
    for match in _CERTBOT.finditer(log):
        names = lineages.get(match["name"])
        if names is None:
            continue  # a lineage this config no longer has
        at, interval = _time(match["at"]), match["interval"]
        seconds = int(interval.rstrip("smhd")) * _UNITS.get(interval[-1], 1)
        when = f"{at + timedelta(seconds=seconds):%Y-%m-%d %H:%M} UTC" if at else f"{interval} after the failure"
        out.append(Failure(names, at, match["error"], "", f"{when} (certbot's loop)"))
    return out


def last_failures(plan: Plan, log: str) -> dict[frozenset[str], Failure]:
    """The last failure per name set in the edge's log."""
    found = traefik_failures(log) if plan.config.edge.kind == "traefik" else certbot_failures(plan, log)
    return {f.names: f for f in found}  # in log order: the last one wins


def in_flight(plan: Plan, log: str) -> frozenset[str]:
    """The domains (a wildcard's without `*.`) an order of the edge's is validating now, per its log: lego
    presented their challenge and has not cleaned it up since the edge last started; certbot.sh began
    ordering their certificate and has not ended. Their TXT records are live, not stale."""
    if plan.config.edge.kind == "traefik":
        text = _COLOURS.sub("", log)
        text = text[text.rfind(TRAEFIK_START) + 1 :]  # a killed run's challenges ended with it
        open_: dict[str, int] = {}
        for pattern, step in ((_PRESENT, 1), (_CLEANUP, -1)):
            for match in pattern.finditer(text):
                domain = match["domain"].removeprefix("*.")
                open_[domain] = open_.get(domain, 0) + step
        return frozenset(d for d, count in open_.items() if count > 0)
    lineages = {min(names, key=len): names for names in name_sets(plan)}
    running = {m["name"]: m["end"] == ": ordering" for m in _CERTBOT_RUN.finditer(log)}  # the last line wins
    return frozenset(n.removeprefix("*.") for name, on in running.items() if on for n in lineages.get(name, ()))


def acme_client(plan: Plan) -> str:
    """The edge's service that orders certificates: Traefik, or NGINX's certbot."""
    return "traefik" if plan.config.edge.kind == "traefik" else "certbot"


def edge_log(plan: Plan, docker: Engine) -> str:
    """The tail of the log of the edge's ACME client (Traefik, or NGINX's certbot) while it runs; "" when
    it does not (a stopped client orders nothing: its log's open challenges ended with it)."""
    service = acme_client(plan)
    containers = docker.containers([project_name(EDGE_STACK)])
    edge = [c for c in containers if c.service == service and c.state in ("running", "restarting")]
    return "".join(docker.logs_tail(c.id, LOG_LINES) for c in edge)
