"""The NGINX edge publishes 80/443 (TCP routes are published by their own services)."""

from __future__ import annotations

from homelab.apps import web_ports
from homelab.plan import AppContext


def customize(ctx: AppContext) -> None:
    ctx.services["nginx"].ports += web_ports(ctx.config)
