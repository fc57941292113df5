"""The NGINX + certbot edge: the same routes as Traefik, as server blocks."""

from __future__ import annotations

from collections.abc import Mapping

from homelab.plan import Plan
from homelab.render import Rendering, tls_policy
from homelab.render.edge_traefik import ca_server
from homelab.render.templating import render_template

CERT_DIR = "/etc/letsencrypt/live"
WEBROOT = "/var/www/certbot"
HEALTH_PORT = 8081


def render(plan: Plan, rendering: Rendering) -> None:
    rendering.add("edge/nginx/nginx.conf", nginx_conf(plan))
    acme = plan.config.domain.acme
    rendering.add(
        "edge/certbot/certbot.sh",
        render_template("certbot.sh.j2", hosts=[r.host for r in plan.routes], email=acme.email, server=ca_server(plan)),
    )


def nginx_conf(
    plan: Plan,
    http_listen: str = "80",
    https_listen: str = "443",
    cert_dir: str = CERT_DIR,
    health_listen: str = f"127.0.0.1:{HEALTH_PORT}",
    upstreams: Mapping[str, str] | None = None,
) -> str:
    """The listen addresses, certificate folder and upstream addresses are parameters so contract
    tests can run the very same configuration on loopback ports with test certificates and local
    backends. `upstreams` maps an app to `host:port`; by default each app's service name on the proxy
    network, resolved through Docker's DNS when a request needs it."""
    default_upstreams = {r.app: f"{r.service}:{r.port}" for r in plan.routes}
    return render_template(
        "nginx.conf.j2",
        routes=plan.routes,
        upstreams={**default_upstreams, **(upstreams or {})},
        ciphers=tls_policy.openssl_ciphers(),
        curves=tls_policy.openssl_curves(),
        lan_cidrs=plan.config.edge.lan_cidrs,
        hsts_seconds=plan.config.edge.hsts_seconds,
        # redirects name the public port when the host publishes HTTPS somewhere other than 443
        public_port_suffix="" if plan.config.edge.https_port == 443 else f":{plan.config.edge.https_port}",
        http_listen=http_listen,
        https_listen=https_listen,
        cert_dir=cert_dir,
        webroot=WEBROOT,
        health_listen=health_listen,
    )
