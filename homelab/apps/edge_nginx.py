"""The NGINX edge publishes 80/443 (TCP routes are published by their own services). On the dns challenge
certbot runs certbot's own image with the rfc2136 plugin (same tag) and gets the TSIG secret as a file
(certbot.sh writes certbot's credentials INI from it). A private ACME CA's certificates (acme.ca_bundle)
are a read-only file certbot's HTTP library trusts (REQUESTS_CA_BUNDLE)."""

from __future__ import annotations

from homelab.apps import web_ports
from homelab.certs.policy import ACME_CA_BUNDLE, TSIG_SECRET
from homelab.plan_model import AppContext, Mount


def customize(ctx: AppContext) -> None:
    ctx.services["nginx"].ports += web_ports(ctx.config)
    acme = ctx.config.domain.acme
    if acme.challenge == "dns" and acme.rfc2136:
        certbot = ctx.services["certbot"]
        if "certbot" not in ctx.config.images:  # upstream tags each plugin image as certbot/certbot
            certbot.image = certbot.image.replace("certbot/certbot:", "certbot/dns-rfc2136:")
        ctx.pass_user_secret(certbot, "RFC2136_TSIG_SECRET_FILE", TSIG_SECRET, acme.rfc2136.tsig_secret_file)
    if acme.ca_bundle:
        certbot = ctx.services["certbot"]
        certbot.mounts.append(Mount(str(ctx.secret_path(acme.ca_bundle)), ACME_CA_BUNDLE, read_only=True))
        certbot.environment["REQUESTS_CA_BUNDLE"] = ACME_CA_BUNDLE
