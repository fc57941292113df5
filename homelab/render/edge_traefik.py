"""The Traefik edge: static config, dynamic config (TLS options, middlewares) and per-route labels."""

from __future__ import annotations

from typing import Any

from homelab.certs.policy import RESOLVER, STAGING_RESOLVER, ca_server, resolver_for, rfc2136_address, staging_server
from homelab.config.models import Acme
from homelab.layout import PROXY_NETWORK
from homelab.plan_model import Plan, Route, TcpRoute
from homelab.render import tls_policy
from homelab.render.rendering import GENERATED_MARK, Rendering
from homelab.render.sso import AUTH_PORT
from homelab.render.yamldump import dump
from homelab.sso_routes import IDENTITY_HEADERS, guards

PING_PORT = 8082
SSO_MIDDLEWARE = "sso"


def render(plan: Plan, rendering: Rendering) -> None:
    rendering.add("edge/traefik/traefik.yml", dump(static_config(plan), header=GENERATED_MARK))
    rendering.add("edge/traefik/dynamic.yml", dump(dynamic_config(plan), header=GENERATED_MARK))


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


def dynamic_config(plan: Plan, sso_auth_url: str = f"http://sso:{AUTH_PORT}/traefik") -> dict[str, Any]:
    edge = plan.config.edge
    middlewares: dict[str, Any] = {
        "secure-headers": {
            "headers": {
                "stsSeconds": edge.hsts_seconds,
                "stsIncludeSubdomains": True,
                "contentTypeNosniff": True,
                "referrerPolicy": "same-origin",
                "customFrameOptionsValue": "SAMEORIGIN",
                # who the user is comes from the portal's answer only (the sso middleware), never a client
                "customRequestHeaders": {header: "" for header in IDENTITY_HEADERS},
            }
        },
        "lan-only": {"ipAllowList": {"sourceRange": list(edge.lan_cidrs)}},
    }
    if guards(plan):
        # X-Forwarded-Host/-Uri are Traefik's own (trustForwardHeader off): a client cannot name another page
        middlewares[SSO_MIDDLEWARE] = {
            "forwardAuth": {
                "address": sso_auth_url,
                "trustForwardHeader": False,
                "authResponseHeaders": list(IDENTITY_HEADERS),
            }
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
    guard = guards(plan).get(route.app)
    labels = _router_labels(plan, route, route.app, f"Host(`{route.host}`)", guard is not None)
    if guard and guard.bypass:  # a longer rule: Traefik tries it before the guarded one
        rule = f"Host(`{route.host}`) && PathRegexp(`{guard.bypass_regex}`)"
        labels.update(_router_labels(plan, route, f"{route.app}-sso-bypass", rule, False))
    labels[f"traefik.http.services.{route.app}.loadbalancer.server.port"] = str(route.port)
    return labels


def _router_labels(plan: Plan, route: Route, name: str, rule: str, guarded: bool) -> dict[str, str]:
    router = f"traefik.http.routers.{name}"
    labels = {
        "traefik.enable": "true",
        "traefik.docker.network": PROXY_NETWORK,
        f"{router}.rule": rule,
        f"{router}.entrypoints": "websecure",
        f"{router}.tls.certresolver": resolver_for(plan, route.host),
        f"{router}.service": route.app,
    }
    if plan.config.domain.wildcard:  # one order for every router: the domain and *.domain
        labels[f"{router}.tls.domains[0].main"] = plan.config.domain.name
        labels[f"{router}.tls.domains[0].sans"] = f"*.{plan.config.domain.name}"
    middlewares = []
    if route.lan_only:
        middlewares.append("lan-only@file")
    if route.well_known_dav:
        middlewares.append("dav-redirect@file")
    if guarded:
        middlewares.append(f"{SSO_MIDDLEWARE}@file")
    if middlewares:
        labels[f"{router}.middlewares"] = ",".join(middlewares)
    return labels
