"""`sso:` in homelab.yaml: the single sign-on portal (LemonLDAP::NG), its users and groups, and how each
app is entered: behind the edge's forward-auth, by OpenID Connect, or on its own login."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal

from pydantic import Field, model_validator

from homelab.config.base import Model
from homelab.config.types import Email, GroupName, Login, SecretFile, Subdomain

Access = Literal["forward-auth", "oidc", "none"]
# The apps whose own login speaks OpenID Connect (Nextcloud user_oidc, Gitea's OAuth2 source, Jenkins
# oic-auth, Grafana generic_oauth); the others can only be put behind forward-auth.
OIDC_APPS = frozenset({"nextcloud", "gitea", "jenkins", "grafana"})
# Plex's clients (TVs, phones, plex.tv relays) sign in to plex.tv, never to a portal, and speak no OIDC.
OWN_LOGIN_ONLY = {"plex": "Plex's apps (TVs, phones, plex.tv) cannot pass a login portal or speak OpenID Connect"}
SSO_APPS = ("plex", "nextcloud", "gitea", "jenkins", "rstudio", "grafana")


class SsoUser(Model):
    password_file: SecretFile = Field(
        description="Secret file with the user's password hash (bcrypt), written by `homelab sso passwd USER`."
    )
    groups: list[GroupName] = Field(default_factory=list, description="Groups the user is in (from sso.groups).")
    email: Email | None = Field(None, description="Mail address handed to the apps (OIDC email claim).")
    name: str | None = Field(None, min_length=1, max_length=128, description="Display name handed to the apps.")
    totp: bool = Field(
        False, description="Require a TOTP second factor (the user enrols an authenticator app on the portal)."
    )


class SsoApp(Model):
    access: Access = Field(
        description="forward-auth (the edge asks the portal before every request), oidc (the app's own "
        "OpenID Connect login against the portal) or none (the app's own login only)."
    )
    groups: list[GroupName] = Field(default_factory=list, description="Groups allowed in; empty: every signed-in user.")


class Sso(Model):
    enabled: bool = Field(False, description="Run the single sign-on portal and put the apps behind it.")
    subdomain: Subdomain = Field("auth", description="The portal's host label under domain.name.")
    session_hours: int = Field(12, ge=1, le=720, description="Hours a sign-in lasts (LemonLDAP::NG's session timeout).")
    groups: list[GroupName] = Field(default_factory=list, description="The groups users can be in.")
    users: dict[Login, SsoUser] = Field(default_factory=dict, description="The people who can sign in, by login.")
    apps: dict[str, SsoApp] = Field(
        default_factory=dict,
        description="How each app is entered, by app name (plex, nextcloud, gitea, jenkins, rstudio, grafana); "
        "an app not listed keeps its own login.",
    )

    @model_validator(mode="after")
    def _has_users(self) -> Sso:
        if self.enabled and not self.users:
            raise ValueError("sso is enabled but has no users: add one under sso.users")
        return self


def sso_problems(sso: Sso) -> Iterator[tuple[tuple[str | int, ...], str]]:
    """Groups that sso.groups does not list, unknown apps, and access modes an app cannot take, each at
    the key that names it."""
    known = set(sso.groups)
    for login, user in sso.users.items():
        for i, group in enumerate(user.groups):
            if group not in known:
                yield ("sso", "users", login, "groups", i), f"group {group!r} is not listed in sso.groups"
    for app, settings in sso.apps.items():
        if app not in SSO_APPS:
            yield ("sso", "apps", app), f"unknown app {app!r} (known: {', '.join(SSO_APPS)})"
            continue
        if settings.access != "none" and app in OWN_LOGIN_ONLY:
            yield (
                ("sso", "apps", app, "access"),
                f"{app} cannot use {settings.access!r}: {OWN_LOGIN_ONLY[app]}; use 'none' (its own login), "
                f"with apps.{app}.lan_only if it should not face the internet",
            )
        elif settings.access == "oidc" and app not in OIDC_APPS:
            yield (
                ("sso", "apps", app, "access"),
                f"{app} has no OpenID Connect login: use 'forward-auth' (OIDC apps: {', '.join(sorted(OIDC_APPS))})",
            )
        for i, group in enumerate(settings.groups):
            if group not in known:
                yield ("sso", "apps", app, "groups", i), f"group {group!r} is not listed in sso.groups"
