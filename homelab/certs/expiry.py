"""Expiry watched: the collectd exec program that measures days to expiry per served name, and what
the monitoring stack needs to run it (its argv and the alert threshold). The program asks the edge over
TLS, as a browser would, so it measures what is served and never reads a store holding private keys."""

from __future__ import annotations

from pathlib import Path

from homelab.plan_model import Plan

SCRIPT = Path(__file__).with_name("cert-expiry.sh")
PROGRAM = "/usr/local/lib/homelab/cert-expiry"  # where the collectd image installs it
PLUGIN = "certs"  # collectd identifier: <host>/certs-<name>/gauge-days_left
TYPE, TYPE_INSTANCE = "gauge", "days_left"
ALERT_DAYS = 14  # Let's Encrypt clients renew 30 days ahead: 14 left means renewal has failed for 2 weeks


def script() -> str:
    return SCRIPT.read_text(encoding="utf-8")


def served_names(plan: Plan) -> list[str]:
    """Every name the edge serves over HTTPS, once each (two services may share a host name)."""
    return sorted({r.host for r in plan.routes})


def exec_args(plan: Plan) -> list[str]:
    """The program's arguments: collectd runs on the host network, so the edge is on loopback."""
    names = served_names(plan)
    return ["127.0.0.1", str(plan.config.edge.https_port), *names] if names else []
