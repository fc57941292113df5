"""The Traefik edge: it publishes 80/443 and every TCP route, and gets the DNS challenge's credentials
as files (`<VARIABLE>_FILE`, which lego reads), never as values; a private ACME CA's certificates
(acme.ca_bundle) as a read-only file lego trusts (LEGO_CA_CERTIFICATES)."""

from __future__ import annotations

from homelab.apps import web_ports
from homelab.certs.policy import (
    ACME_CA_BUNDLE,
    EXEC_PROGRAM,
    HTTPREQ_SECRETS,
    TSIG_SECRET,
    httpreq_credentials,
    httpreq_env,
    rfc2136_env,
)
from homelab.plan_model import AppContext, Mount


def customize(ctx: AppContext) -> None:
    traefik = ctx.services["traefik"]
    traefik.ports += web_ports(ctx.config)
    traefik.ports += [f"{r.public_port}:{r.public_port}" for r in ctx.plan.tcp_routes]
    for variable, relative in sorted(ctx.config.domain.acme.dns_credentials.items()):
        ctx.pass_user_secret(traefik, f"{variable}_FILE", f"acme_{variable.lower()}", relative)
    rfc2136 = ctx.config.domain.acme.rfc2136
    if rfc2136:
        traefik.environment.update(rfc2136_env(rfc2136))
        ctx.pass_user_secret(traefik, "RFC2136_TSIG_SECRET_FILE", TSIG_SECRET, rfc2136.tsig_secret_file)
    httpreq = ctx.config.domain.acme.httpreq
    if httpreq:
        traefik.environment.update(httpreq_env(httpreq))
        for variable, relative in httpreq_credentials(httpreq).items():
            ctx.pass_user_secret(traefik, f"{variable}_FILE", HTTPREQ_SECRETS[variable], relative)
    bundle = ctx.config.domain.acme.ca_bundle
    if bundle:
        traefik.mounts.append(Mount(str(ctx.secret_path(bundle)), ACME_CA_BUNDLE, read_only=True))
        traefik.environment["LEGO_CA_CERTIFICATES"] = ACME_CA_BUNDLE
    program = ctx.config.domain.acme.exec
    if program:
        traefik.mounts.append(Mount(str(ctx.secret_path(program.program)), EXEC_PROGRAM, read_only=True))
        traefik.environment["EXEC_PATH"] = EXEC_PROGRAM
