"""The ACME policy both edges follow: which CA (production, staging first), which certificates (one per name,
or the domain and its wildcard), which resolver a router asks, and how the DNS-01 providers are reached and
authenticated. The renderers write it (homelab/render/edge_traefik.py, edge_nginx.py); the certificate verbs
(guard, status, staging, preflight) read it, so it lives here, below both."""

from __future__ import annotations

from homelab.config.dns01 import Httpreq, Rfc2136
from homelab.plan_model import Plan

RESOLVER = "le"
STAGING_RESOLVER = "le-staging"  # staging first (homelab/certs/staging.py)
LETSENCRYPT = "https://acme-v02.api.letsencrypt.org/directory"
LETSENCRYPT_STAGING = "https://acme-staging-v02.api.letsencrypt.org/directory"
TSIG_SECRET = "acme_rfc2136_tsig"  # noqa: S105 - a name, not a value; the edge's secret holding the RFC 2136 TSIG key (both edges)
# where acme.ca_bundle is mounted (read-only, a file) in either edge's ACME client
ACME_CA_BUNDLE = "/etc/ssl/homelab-acme-ca.pem"
EXEC_PROGRAM = "/etc/traefik/acme-exec"  # where the exec provider's program is mounted (EXEC_PATH)
# the edge's secrets holding the httpreq endpoint's Basic-auth credentials, by lego's variable for them
HTTPREQ_SECRETS = {"HTTPREQ_USERNAME": "acme_httpreq_username", "HTTPREQ_PASSWORD": "acme_httpreq_password"}


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


def httpreq_env(httpreq: Httpreq) -> dict[str, str]:
    """lego's httpreq provider settings but the credentials (HTTPREQ_USERNAME_FILE/HTTPREQ_PASSWORD_FILE)."""
    return {"HTTPREQ_ENDPOINT": httpreq.endpoint}


def httpreq_credentials(httpreq: Httpreq) -> dict[str, str]:
    """lego's credential variables -> the user's secret files holding them (none without Basic auth)."""
    if httpreq.username_file is None or httpreq.password_file is None:
        return {}
    return {"HTTPREQ_USERNAME": httpreq.username_file, "HTTPREQ_PASSWORD": httpreq.password_file}


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
