"""The monitoring stack's files: collectd (config + image), carbon/graphite, Grafana provisioning."""

from __future__ import annotations

from homelab.plan import Plan
from homelab.render import Rendering


def render(plan: Plan, rendering: Rendering, secret_values: dict[str, str]) -> None:
    """Placeholder until the metric catalog lands: the files exist so the stack is complete."""
    rendering.add("monitoring/collectd/collectd.conf", "# collectd\n")
