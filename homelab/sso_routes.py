"""Which routes single sign-on guards, and the paths on them real clients reach without a session.

Read by both edges (homelab/render/edge_nginx.py, edge_traefik.py) and the portal's configuration
(homelab/render/sso.py), so the edge that asks and the portal that answers agree on every host. Also the
OpenID Connect clients, one per app with `access: oidc`: the portal's provider and the app's own settings
(homelab/apps/) are made from the same records.

Callback paths, read from each app's documentation: Nextcloud user_oidc `/apps/user_oidc/code`; Gitea's
OAuth2 source (named `homelab` here) `/user/oauth2/homelab/callback`; Jenkins oic-auth
`/securityRealm/finishLogin`; Grafana generic_oauth `/login/generic_oauth`.
"""

from __future__ import annotations

from dataclasses import dataclass

from homelab.config.models import Config
from homelab.layout import secret_name
from homelab.plan_model import Plan, Route

# The headers the portal hands an app about the signed-in user. An edge removes them from every
# client request (any route), and sets them only from the portal's answer on forward-auth routes.
IDENTITY_HEADERS = {"Remote-User": "$uid", "Remote-Groups": "$groups", "Remote-Email": "$mail", "Remote-Name": "$cn"}

# Paths (regular expressions on the path, anchored at its start) that never see the portal, per app,
# because the clients that use them cannot follow a login page; the app's own authentication (app
# passwords, tokens, keys, webhook secrets) guards them. Documented in docs/sso.md.
BYPASS: dict[str, tuple[tuple[str, str], ...]] = {
    "nextcloud": (
        (r"^/remote\.php/", "WebDAV, CalDAV, CardDAV (desktop and mobile sync, DAVx5) with app passwords"),
        (r"^/public\.php/", "public share links (WebDAV for shares)"),
        (r"^/ocs/", "OCS API of the desktop and mobile apps"),
        (r"^/(index\.php/)?login/v2", "login flow v2 (how the desktop and mobile apps get an app password)"),
        (r"^/status\.php$", "status: the clients' server check and the health probe"),
        (r"^/\.well-known/", "CalDAV/CardDAV discovery, webfinger, nodeinfo"),
    ),
    "gitea": (
        (r"^/[^/]+/[^/]+/(info/refs|git-upload-pack|git-receive-pack|info/lfs/)", "git over HTTPS (and LFS)"),
        (r"^/[^/]+/[^/]+\.git/(info/refs|git-upload-pack|git-receive-pack|info/lfs/)", "git over HTTPS, .git URLs"),
        (r"^/api/", "the REST API with access tokens, and /api/healthz"),
    ),
    "jenkins": (
        (r"^/(github-webhook|gitea-webhook|generic-webhook-trigger|multibranch-webhook-trigger)/", "webhooks"),
        (r"^/cli(/|$)", "the Jenkins CLI (jenkins-cli.jar over HTTP/websocket, with an API token)"),
        (r"^/(.+/)?api/(json|xml|python)", "the remote access API with API tokens"),
    ),
    "monitoring": ((r"^/api/", "Grafana's HTTP API with service account tokens, and /api/health"),),
    "rstudio": (),
}

# Where the portal's container reads its configuration (LemonLDAP::NG's File backend: lmConf-<n>.json)
LLNG_CONF_DIR = "/var/lib/lemonldap-ng/conf"
LMCONF_SECRET = secret_name("sso", "lmconf")  # lmConf-1.json: holds the OIDC signing key and client secrets
USERS_SECRET = secret_name("sso", "users")  # the users file: holds the password hashes
OIDC_KEY_SECRET = secret_name("sso", "oidc_key")  # the OIDC provider's RSA signing key (PEM), generated

# homelab.yaml's name of an app -> the app name its route carries (Grafana's is the monitoring stack's)
ROUTE_APP = {"grafana": "monitoring"}


@dataclass(frozen=True)
class Guard:
    """One forward-auth route: the groups let in (empty: every signed-in user) and its bypass paths."""

    route: Route
    groups: tuple[str, ...]
    bypass: tuple[str, ...]

    @property
    def bypass_regex(self) -> str:
        """The bypass paths as one regular expression (an edge matches them in one rule)."""
        return "|".join(f"(?:{pattern})" for pattern in self.bypass)


def access_rule(groups: tuple[str, ...]) -> str:
    """A LemonLDAP::NG access rule (a Perl expression, as both the handler's location rules and the OIDC
    provider's client rules take them): any of the groups, or every signed-in user."""
    return " or ".join(f'inGroup("{group}")' for group in groups) if groups else "1"


def portal_host(config: Config) -> str:
    return f"{config.sso.subdomain}.{config.domain.name}"


def guards(plan: Plan) -> dict[str, Guard]:
    """Forward-auth routes by app (route app name)."""
    sso = plan.config.sso
    if not sso.enabled:
        return {}
    routes = {r.app: r for r in plan.routes}
    found = {}
    for name, settings in sso.apps.items():
        app = ROUTE_APP.get(name, name)
        if settings.access == "forward-auth" and app in routes:
            paths = tuple(pattern for pattern, _ in BYPASS.get(app, ()))
            found[app] = Guard(routes[app], tuple(settings.groups), paths)
    return found


CALLBACKS = {
    "nextcloud": "/apps/user_oidc/code",
    "gitea": "/user/oauth2/homelab/callback",
    "jenkins": "/securityRealm/finishLogin",
    "grafana": "/login/generic_oauth",
}
SCOPES = ("openid", "profile", "email", "groups")
# The apps whose OIDC login sends no PKCE code challenge: their client cannot require it (the client secret
# still authenticates them at the token endpoint). Gitea's OAuth2 login sources build the authorization URL
# without one up to 1.22 at least (go-gitea/gitea#21376 and #34747, open; the PKCE pull request #38202 is
# not merged); Grafana (use_pkce), Nextcloud user_oidc (use_pkce) and Jenkins oic-auth (pkceEnabled) send one.
NO_PKCE = frozenset({"gitea"})


@dataclass(frozen=True)
class Client:
    """What an app's OIDC login is configured with (its client secret is the secret `sso_oidc_<app>`)."""

    app: str
    client_id: str
    redirect_uri: str
    issuer: str
    groups: tuple[str, ...]

    @property
    def pkce(self) -> bool:
        """The provider requires a PKCE code challenge of this client (every app whose login sends one)."""
        return self.app not in NO_PKCE

    @property
    def discovery_url(self) -> str:
        return f"{self.issuer}.well-known/openid-configuration"

    @property
    def secret_name(self) -> str:
        return secret_name("sso", f"oidc_{self.app}")

    def endpoint(self, name: str) -> str:
        """The provider's endpoints (LemonLDAP::NG's, as its discovery document lists them): authorize,
        token, userinfo, jwks, logout."""
        return f"{self.issuer}oauth2/{name}"


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
