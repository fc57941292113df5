"""The single sign-on portal: its configuration mounted where LemonLDAP::NG's File backend reads it, the
OIDC signing key and one client secret per OIDC app generated, every secret readable by www-data."""

from __future__ import annotations

from dataclasses import replace

from homelab.plan_model import AppContext, Secret
from homelab.sso_routes import LLNG_CONF_DIR, LMCONF_SECRET, OIDC_KEY_SECRET, USERS_SECRET, clients

WWW_DATA = 33  # the FastCGI server's user in the image (facts/lemonldap-ng.yaml `users`)


def customize(ctx: AppContext) -> None:
    service, secrets = ctx.services["sso"], ctx.plan.secrets
    ctx.mount_rendered_secret(service, LMCONF_SECRET, f"{LLNG_CONF_DIR}/lmConf-1.json")
    secrets[OIDC_KEY_SECRET] = Secret(OIDC_KEY_SECRET, None, kind="rsa")
    for client in clients(ctx.plan).values():  # the app's side reads it (an app's hook mounts it)
        secrets.setdefault(client.secret_name, Secret(client.secret_name, None))
    for name in (LMCONF_SECRET, USERS_SECRET):
        secrets[name] = replace(secrets[name], owner_uid=WWW_DATA, owner_gid=WWW_DATA)
