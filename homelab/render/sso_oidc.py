"""The portal's OpenID Connect provider: one client per app with `access: oidc` (homelab/sso_routes.py
`clients`), PKCE required of every app whose login sends it, and the signing key."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from homelab.plan_model import Plan
from homelab.sso_routes import access_rule, clients, issuer


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
                "oidcRPMetaDataOptionsRequirePKCE": int(c.pkce),
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
