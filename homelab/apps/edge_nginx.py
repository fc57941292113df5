"""The NGINX edge publishes 80/443 (TCP routes are published by their own services). On the dns challenge
certbot runs certbot's own image with the rfc2136 plugin (same tag) and gets the TSIG secret as a file
(certbot.sh writes certbot's credentials INI from it)."""

from __future__ import annotations

from homelab.apps import web_ports
from homelab.plan_model import AppContext
from homelab.render.edge_traefik import TSIG_SECRET


def customize(ctx: AppContext) -> None:
    ctx.services["nginx"].ports += web_ports(ctx.config)
    acme = ctx.config.domain.acme
    if acme.challenge == "dns" and acme.rfc2136:
        certbot = ctx.services["certbot"]
        if "certbot" not in ctx.config.images:  # upstream tags each plugin image as certbot/certbot
            certbot.image = certbot.image.replace("certbot/certbot:", "certbot/dns-rfc2136:")
        ctx.pass_user_secret(certbot, "RFC2136_TSIG_SECRET_FILE", TSIG_SECRET, acme.rfc2136.tsig_secret_file)
