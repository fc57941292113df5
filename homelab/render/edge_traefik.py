"""The Traefik edge: static config, dynamic config (TLS options, middlewares) and per-route labels."""

from __future__ import annotations

from typing import Any

from homelab.config.dns01 import Httpreq, Rfc2136
from homelab.config.models import Acme
from homelab.layout import PROXY_NETWORK
from homelab.plan_model import Plan, Route, TcpRoute
from homelab.render import tls_policy
from homelab.render.rendering import GENERATED_MARK, Rendering
from homelab.render.yamldump import dump

RESOLVER = "le"
STAGING_RESOLVER = "le-staging"  # staging first (homelab/certs/staging.py)
LETSENCRYPT = "https://acme-v02.api.letsencrypt.org/directory"
LETSENCRYPT_STAGING = "https://acme-staging-v02.api.letsencrypt.org/directory"
PING_PORT = 8082
TSIG_SECRET = "acme_rfc2136_tsig"  # noqa: S105 - a name, not a value; the edge's secret holding the RFC 2136 TSIG key (both edges)
# where acme.ca_bundle is mounted (read-only, a file) in either edge's ACME client
ACME_CA_BUNDLE = "/etc/ssl/homelab-acme-ca.pem"
EXEC_PROGRAM = "/etc/traefik/acme-exec"  # where the exec provider's program is mounted (EXEC_PATH)
# the edge's secrets holding the httpreq endpoint's Basic-auth credentials, by lego's variable for them
HTTPREQ_SECRETS = {"HTTPREQ_USERNAME": "acme_httpreq_username", "HTTPREQ_PASSWORD": "acme_httpreq_password"}


def render(plan: Plan, rendering: Rendering) -> None:
    rendering.add("edge/traefik/traefik.yml", dump(static_config(plan), header=GENERATED_MARK))
    rendering.add("edge/traefik/dynamic.yml", dump(dynamic_config(plan), header=GENERATED_MARK))


def ca_server(plan: Plan) -> str:
    acme = plan.config.domain.acme
    return acme.ca_server or (LETSENCRYPT_STAGING if acme.staging else LETSENCRYPT)


def staging_server(plan: Plan) -> str | None:
    """The CA a new name set goes to first; None when staging first is off or there is no staging CA
    for the configured one (a custom ca_server without staging_ca_server)."""
    acme = plan.config.domain.acme
    if acme.staging or not acme.staging_first:
        return None
    if acme.staging_ca_server:
        return acme.staging_ca_server
    return LETSENCRYPT_STAGING if acme.ca_server is None else None


def rfc2136_address(rfc2136: Rfc2136) -> str:
    host = f"[{rfc2136.server}]" if ":" in rfc2136.server else rfc2136.server
    return f"{host}:{rfc2136.port}"


def rfc2136_env(rfc2136: Rfc2136) -> dict[str, str]:
    """lego's rfc2136 provider settings, but the secret (RFC2136_TSIG_SECRET_FILE, a file it reads)."""
    return {
        "RFC2136_NAMESERVER": rfc2136_address(rfc2136),
        "RFC2136_TSIG_KEY": rfc2136.tsig_key,
        "RFC2136_TSIG_ALGORITHM": f"{rfc2136.tsig_algorithm}.",  # lego wants the name as a DNS name
        # lego solves a wildcard and its domain (one TXT name) one after the other, by default 60 s
        # apart; each value is added beside the other and removed alone, so a second is enough
        "RFC2136_SEQUENCE_INTERVAL": "1",
        # it asks the server it updated (dnsChallenge.resolvers): each second, not every 2 s
        "RFC2136_POLLING_INTERVAL": "1",
    }


def _dns_challenge(acme: Acme) -> dict[str, Any]:
    if acme.rfc2136 is None:
        return {"provider": acme.dns_provider, "propagation": {"delayBeforeChecks": "10s"}}
    # lego finds the zone (SOA) and polls for the record through `resolvers`: the server it updates,
    # not the system's resolver (which may not see a LAN server's zone, or caches the missing record);
    # the authoritative check would ask the zone's NS names on port 53, which a LAN primary need not be
    return {
        "provider": "rfc2136",
        "resolvers": [rfc2136_address(acme.rfc2136)],
        "propagation": {"disableANSChecks": True, "delayBeforeChecks": f"{acme.rfc2136.propagation_seconds}s"},
    }


def httpreq_env(httpreq: Httpreq) -> dict[str, str]:
    """lego's httpreq provider settings but the credentials (HTTPREQ_USERNAME_FILE/HTTPREQ_PASSWORD_FILE)."""
    return {"HTTPREQ_ENDPOINT": httpreq.endpoint}


def httpreq_credentials(httpreq: Httpreq) -> dict[str, str]:
    """lego's credential variables -> the user's secret files holding them (none without Basic auth)."""
    if httpreq.username_file is None or httpreq.password_file is None:
        return {}
    return {"HTTPREQ_USERNAME": httpreq.username_file, "HTTPREQ_PASSWORD": httpreq.password_file}


def _resolver(plan: Plan, ca: str) -> dict[str, Any]:
    """One ACME resolver (a new dict each time: the YAML dump would share equal objects as anchors)."""
    acme = plan.config.domain.acme
    challenge: dict[str, Any]
    if acme.challenge == "http":
        challenge = {"httpChallenge": {"entryPoint": "web"}}
    elif acme.challenge == "tls":
        challenge = {"tlsChallenge": {}}
    else:
        challenge = {"dnsChallenge": _dns_challenge(acme)}
    # one store: acme.json keeps each resolver's account and certificates apart
    return {
        "acme": {
            "email": acme.email,
            "storage": "/letsencrypt/acme.json",
            "caServer": ca,
            "keyType": "EC256",
            **challenge,
        }
    }


def static_config(plan: Plan) -> dict[str, Any]:
    resolvers = {RESOLVER: _resolver(plan, ca_server(plan))}
    staging = staging_server(plan)
    if staging:
        resolvers[STAGING_RESOLVER] = _resolver(plan, staging)
    # Go keeps X_Forwarded_For / X.Real.Ip apart from the X-Forwarded-For / X-Real-Ip Traefik sets, but
    # PHP (Nextcloud), CGI and WSGI read them as the same variable: drop such aliases before routing.
    alias_headers = {"aliasHeadersStrategy": "delete"}
    return {
        "global": {"checkNewVersion": False, "sendAnonymousUsage": False},
        "log": {"level": "INFO"},
        "ping": {"entryPoint": "ping"},
        "entryPoints": {
            "web": {
                "address": ":80",
                "http": {
                    "redirections": {
                        "entryPoint": {"to": _redirect_target(plan), "scheme": "https", "permanent": True}
                    },
                    **alias_headers,
                },
            },
            "websecure": {
                "address": ":443",
                "http": {
                    "tls": {"certResolver": RESOLVER},
                    "middlewares": ["secure-headers@file"],
                    **alias_headers,
                },
            },
            "ping": {"address": f":{PING_PORT}", "http": dict(alias_headers)},
            **{r.name: {"address": f":{r.public_port}"} for r in plan.tcp_routes},
        },
        "certificatesResolvers": resolvers,
        "providers": {
            "docker": {
                "endpoint": "tcp://socket-proxy:2375",
                "exposedByDefault": False,
                "network": PROXY_NETWORK,
                "watch": True,
            },
            "file": {"filename": "/etc/traefik/dynamic.yml", "watch": True},
        },
    }


def _redirect_target(plan: Plan) -> str:
    """Redirect to the entry point when the public HTTPS port is the standard one; otherwise to the
    public port (the container always listens on 443, the host may publish another port)."""
    port = plan.config.edge.https_port
    return "websecure" if port == 443 else f":{port}"


def dynamic_config(plan: Plan) -> dict[str, Any]:
    edge = plan.config.edge
    middlewares: dict[str, Any] = {
        "secure-headers": {
            "headers": {
                "stsSeconds": edge.hsts_seconds,
                "stsIncludeSubdomains": True,
                "contentTypeNosniff": True,
                "referrerPolicy": "same-origin",
                "customFrameOptionsValue": "SAMEORIGIN",
            }
        },
        "lan-only": {"ipAllowList": {"sourceRange": list(edge.lan_cidrs)}},
    }
    if any(r.well_known_dav for r in plan.routes):
        middlewares["dav-redirect"] = {
            "redirectRegex": {
                "regex": r"^https?://([^/]+)/\.well-known/(card|cal)dav",
                "replacement": "https://${1}/remote.php/dav/",
                "permanent": True,
            }
        }
    return {
        "tls": {
            "options": {
                "default": {
                    "minVersion": "VersionTLS12",
                    "cipherSuites": tls_policy.go_ciphers(),
                    "curvePreferences": tls_policy.go_curves(),
                    "sniStrict": True,
                }
            }
        },
        "http": {"middlewares": middlewares},
    }


def name_sets(plan: Plan) -> list[frozenset[str]]:
    """The certificates the edge orders: one per served name, or one for the domain and *.domain."""
    domain = plan.config.domain
    if domain.wildcard:
        return [frozenset({domain.name, f"*.{domain.name}"})]
    return [frozenset({host}) for host in sorted({r.host for r in plan.routes})]


def certificate_names(plan: Plan, host: str) -> frozenset[str]:
    """The name set of the certificate that serves `host`."""
    return name_sets(plan)[0] if plan.config.domain.wildcard else frozenset({host})


def resolver_for(plan: Plan, host: str) -> str:
    """The switch: the staging resolver until staging issued the name's certificate (or production
    holds it), production after (homelab/certs/staging.py)."""
    if staging_server(plan) is None or certificate_names(plan, host) in plan.production_ready:
        return RESOLVER
    return STAGING_RESOLVER


def tcp_route_labels(route: TcpRoute) -> dict[str, str]:
    router = f"traefik.tcp.routers.{route.name}"
    return {
        "traefik.enable": "true",
        "traefik.docker.network": PROXY_NETWORK,
        f"{router}.rule": "HostSNI(`*`)",
        f"{router}.entrypoints": route.name,
        f"{router}.service": route.name,
        f"traefik.tcp.services.{route.name}.loadbalancer.server.port": str(route.port),
    }


def route_labels(plan: Plan, route: Route) -> dict[str, str]:
    router = f"traefik.http.routers.{route.app}"
    labels = {
        "traefik.enable": "true",
        "traefik.docker.network": PROXY_NETWORK,
        f"{router}.rule": f"Host(`{route.host}`)",
        f"{router}.entrypoints": "websecure",
        f"{router}.tls.certresolver": resolver_for(plan, route.host),
        f"{router}.service": route.app,
        f"traefik.http.services.{route.app}.loadbalancer.server.port": str(route.port),
    }
    if plan.config.domain.wildcard:  # one order for every router: the domain and *.domain
        labels[f"{router}.tls.domains[0].main"] = plan.config.domain.name
        labels[f"{router}.tls.domains[0].sans"] = f"*.{plan.config.domain.name}"
    middlewares = []
    if route.lan_only:
        middlewares.append("lan-only@file")
    if route.well_known_dav:
        middlewares.append("dav-redirect@file")
    if middlewares:
        labels[f"{router}.middlewares"] = ",".join(middlewares)
    return labels
