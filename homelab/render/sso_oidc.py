"""The portal's OpenID Connect provider: one client per app with `access: oidc`, with the redirect URI the
app's own OIDC login uses, PKCE required, and the signing key; and each app's client settings.

Callback paths, read from each app's documentation: Nextcloud user_oidc `/apps/user_oidc/code`; Gitea's
OAuth2 source (named `homelab` here) `/user/oauth2/homelab/callback`; Jenkins oic-auth
`/securityRealm/finishLogin`; Grafana generic_oauth `/login/generic_oauth`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from homelab.plan_model import Plan
from homelab.sso_routes import ROUTE_APP, access_rule, portal_host

CALLBACKS = {
    "nextcloud": "/apps/user_oidc/code",
    "gitea": "/user/oauth2/homelab/callback",
    "jenkins": "/securityRealm/finishLogin",
    "grafana": "/login/generic_oauth",
}
SCOPES = ("openid", "profile", "email", "groups")


@dataclass(frozen=True)
class Client:
    """What an app's OIDC login is configured with (its client secret is the secret `sso_oidc_<app>`)."""

    app: str
    client_id: str
    redirect_uri: str
    issuer: str
    groups: tuple[str, ...]

    @property
    def discovery_url(self) -> str:
        return f"{self.issuer}.well-known/openid-configuration"

    @property
    def secret_name(self) -> str:
        return f"sso_oidc_{self.app}"


def issuer(plan: Plan) -> str:
    port = plan.config.edge.https_port
    return f"https://{portal_host(plan.config)}{'' if port == 443 else f':{port}'}/"


def clients(plan: Plan) -> dict[str, Client]:
    sso = plan.config.sso
    if not sso.enabled:
        return {}
    hosts = {r.app: r.host for r in plan.routes}
    port = plan.config.edge.https_port
    suffix = "" if port == 443 else f":{port}"
    found = {}
    for app, settings in sso.apps.items():
        host = hosts.get(ROUTE_APP.get(app, app))
        if settings.access == "oidc" and host:
            uri = f"https://{host}{suffix}{CALLBACKS[app]}"
            found[app] = Client(app, f"homelab-{app}", uri, issuer(plan), tuple(settings.groups))
    return found


@dataclass(frozen=True)
class Keys:
    """The provider's secrets: its RSA signing key (PEM, private and public) and each client's secret."""

    private_pem: str
    public_pem: str
    client_secrets: dict[str, str]


def provider(plan: Plan, keys: Keys) -> dict[str, Any]:
    """The lmConf keys of the OpenID Connect provider."""
    found = clients(plan)
    if not found:
        return {"issuerDBOpenIDConnectActivation": 0}
    return {
        "issuerDBOpenIDConnectActivation": 1,
        "oidcServiceMetaDataIssuer": issuer(plan).rstrip("/"),
        "oidcServicePrivateKeySig": keys.private_pem,
        "oidcServicePublicKeySig": keys.public_pem,
        "oidcServiceKeyIdSig": "homelab-1",
        "oidcServiceAllowAuthorizationCodeFlow": 1,
        "oidcServiceAllowImplicitFlow": 0,
        "oidcServiceAllowHybridFlow": 0,
        "oidcRPMetaDataOptions": {
            app: {
                "oidcRPMetaDataOptionsClientID": c.client_id,
                "oidcRPMetaDataOptionsClientSecret": keys.client_secrets[app],
                "oidcRPMetaDataOptionsRedirectUris": c.redirect_uri,
                "oidcRPMetaDataOptionsPublic": 0,
                "oidcRPMetaDataOptionsRequirePKCE": 1,
                "oidcRPMetaDataOptionsBypassConsent": 1,  # the admin chose the app in homelab.yaml
                "oidcRPMetaDataOptionsIDTokenSignAlg": "RS256",
                "oidcRPMetaDataOptionsAccessTokenExpiration": 3600,
                "oidcRPMetaDataOptionsIDTokenExpiration": 3600,
                "oidcRPMetaDataOptionsRule": access_rule(c.groups),
                "oidcRPMetaDataOptionsUserIDAttr": "uid",
                "oidcRPMetaDataOptionsDisplayName": app,
            }
            for app, c in found.items()
        },
        "oidcRPMetaDataOptionsExtraClaims": {app: {"groups": "groups"} for app in found},
        "oidcRPMetaDataExportedVars": {
            app: {
                "email": "mail",
                "name": "cn",
                "preferred_username": "uid",
                "groups": "groups;string;always",
            }
            for app in found
        },
    }
