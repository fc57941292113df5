"""The NGINX + certbot edge: the same routes as Traefik, as server blocks."""

from __future__ import annotations

from collections.abc import Mapping

from homelab.certs.policy import ca_server, name_sets, staging_server
from homelab.plan_model import Plan
from homelab.render import tls_policy
from homelab.render.rendering import Rendering
from homelab.render.sso import AUTH_PORT
from homelab.render.templating import render_template
from homelab.sso_routes import IDENTITY_HEADERS, guards

LETSENCRYPT = "/etc/letsencrypt"
# The pairs NGINX serves, one folder per name: a self-signed placeholder until certbot's first
# certificate for the name, then a copy of certbot's live/<name>/ (see certbot.sh.j2).
CERT_DIR = f"{LETSENCRYPT}/edge"
WEBROOT = "/var/www/certbot"
HEALTH_PORT = 8081
# The unprivileged user of Debian's nginx package (the edge image, nginx.Dockerfile.j2) that the
# worker processes run as.
WORKER_USER = "www-data"
# The rendered configuration and the copy NGINX runs (see nginx-run.sh.j2).
CONF = "/etc/nginx/nginx.conf"
LIVE_CONF = "/etc/nginx/live.conf"
# certbot waits this long after writing the placeholders before its first attempt; NGINX's container
# looks at the serial certbot bumps after installing certificates, and up the apps' names, this often.
FIRST_WAIT_SECONDS = 10
# certbot-dns-rfc2136's INI (holds the TSIG secret): written by certbot.sh at start, outside the
# certbot folder so it is in no dataset and no backup.
RFC2136_CREDENTIALS = "/run/rfc2136.ini"
RELOAD_POLL_SECONDS = 5


def render(plan: Plan, rendering: Rendering) -> None:
    rendering.add("edge/nginx/Dockerfile", render_template("nginx.Dockerfile.j2"))
    rendering.add("edge/nginx/nginx.conf", nginx_conf(plan))
    rendering.add("edge/nginx/run.sh", nginx_run_sh(plan))
    rendering.add("edge/certbot/certbot.sh", certbot_sh(plan))


def certbot_sh(
    plan: Plan,
    config_dir: str = LETSENCRYPT,
    edge_dir: str = CERT_DIR,
    first_wait: int = FIRST_WAIT_SECONDS,
    interval: str = "12h",
    credentials: str = RFC2136_CREDENTIALS,
) -> str:
    """certbot's loop: placeholders, issuance (staging first), renewal, and the copy into `edge_dir` that
    NGINX serves. The folders and the waits are parameters so a test can run the script outside the
    container."""
    acme = plan.config.domain.acme
    lineages = [{"name": min(names, key=len), "domains": sorted(names, key=len)} for names in name_sets(plan)]
    return render_template(
        "certbot.sh.j2",
        hosts=[r.host for r in plan.routes],
        lineages=lineages,
        wildcard=plan.config.domain.wildcard,
        rfc2136=acme.rfc2136 if acme.challenge == "dns" else None,
        credentials=credentials,
        email=acme.email,
        server=ca_server(plan),
        staging=staging_server(plan),
        config_dir=config_dir,
        edge_dir=edge_dir,
        webroot=WEBROOT,
        first_wait=first_wait,
        interval=interval,
    )


def nginx_run_sh(
    plan: Plan,
    edge_dir: str = CERT_DIR,
    poll_seconds: int = RELOAD_POLL_SECONDS,
    conf: str = CONF,
    live_conf: str = LIVE_CONF,
    upstreams: Mapping[str, str] | None = None,
) -> str:
    """The NGINX container's command: wait for a pair per name, start, reload when certbot signals or
    an app's name resolves differently. Paths and upstreams are parameters for the tests, as in nginx_conf()."""
    names = sorted({address.rsplit(":", 1)[0] for address in app_upstreams(plan, upstreams).values()})
    return render_template(
        "nginx-run.sh.j2",
        hosts=[r.host for r in plan.routes],
        edge_dir=edge_dir,
        poll_seconds=poll_seconds,
        conf=conf,
        live_conf=live_conf,
        upstream_hosts=names,
    )


def app_upstreams(plan: Plan, upstreams: Mapping[str, str] | None = None) -> dict[str, str]:
    """`host:port` per app: by default its service name on the proxy network (Docker's DNS answers)."""
    return {**{r.app: f"{r.service}:{r.port}" for r in plan.routes}, **(upstreams or {})}


def nginx_conf(
    plan: Plan,
    http_listen: str = "80",
    https_listen: str = "443",
    cert_dir: str = CERT_DIR,
    health_listen: str = f"127.0.0.1:{HEALTH_PORT}",
    upstreams: Mapping[str, str] | None = None,
    worker_user: str = WORKER_USER,
    sso_auth: str = f"sso:{AUTH_PORT}",
) -> str:
    """The listen addresses, certificate folder, upstream addresses and worker user are parameters so
    contract tests can run the very same configuration on loopback ports with test certificates, local
    backends and a user the test machine has. `upstreams` maps an app to `host:port` (app_upstreams());
    `sso_auth` is the single sign-on handler's `host:port`."""
    return render_template(
        "nginx.conf.j2",
        routes=plan.routes,
        upstreams=app_upstreams(plan, upstreams),
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
        worker_user=worker_user,
        guards=guards(plan),
        sso_auth=sso_auth,
        identity_headers={header: f"homelab_sso_{header[7:].lower()}" for header in IDENTITY_HEADERS},
    )
