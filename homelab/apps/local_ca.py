"""The local CA (`homelab up --local`): Traefik orders from Pebble and trusts Pebble's HTTPS certificate.

lego (Traefik's ACME client) reads extra roots for the ACME server's own HTTPS from LEGO_CA_CERTIFICATES;
the file is rendered into the edge stack by homelab/render/local_ca.py.
"""

from __future__ import annotations

from homelab.layout import EDGE_STACK
from homelab.plan_model import AppContext, Mount

HTTPS_ROOT = "local-ca/pebble-https-root.pem"  # in the edge stack's folder
HTTPS_ROOT_TARGET = "/etc/homelab/local-ca-https-root.pem"


def customize(ctx: AppContext) -> None:
    traefik = ctx.plan.stacks[EDGE_STACK].services["traefik"]
    traefik.mounts.append(Mount(f"./{HTTPS_ROOT}", HTTPS_ROOT_TARGET, read_only=True))
    traefik.environment["LEGO_CA_CERTIFICATES"] = HTTPS_ROOT_TARGET
    traefik.depends_on.append("pebble")  # its first orders go to the CA: start it first
