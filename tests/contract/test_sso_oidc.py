"""Contract: the portal's OpenID Connect provider (Debian's LemonLDAP::NG 2.16, the rendered configuration)
behind the real NGINX edge, used by a real OIDC client library (Authlib) with each app's rendered client
settings: discovery, the authorization-code flow with PKCE, the signed ID token, userinfo."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from types import SimpleNamespace
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from homelab.plan_model import Plan
from homelab.render import sso as render_sso
from homelab.render.sso_oidc import Keys
from homelab.secrets import secret_contents
from homelab.sso_routes import Client, clients, issuer
from tests.contract.edge_support import Edge, LocalCA, free_port
from tests.contract.sso_support import PASSWORDS, client, form, portal, sso_edge, sso_plan, transport

pytestmark = pytest.mark.real

OIDC_APPS = ("nextcloud", "gitea", "jenkins", "grafana")
SSO: dict[str, Any] = {
    "enabled": True,
    "groups": ["family", "admins"],
    "users": {
        "alice": {"password_file": "secrets/sso-alice", "groups": ["family", "admins"], "email": "alice@example.com"},
        "bob": {"password_file": "secrets/sso-bob", "groups": ["family"], "email": "bob@example.com"},
    },
    "apps": {
        "nextcloud": {"access": "oidc"},
        "gitea": {"access": "oidc", "groups": ["family"]},
        "jenkins": {"access": "oidc", "groups": ["admins"]},
        "grafana": {"access": "oidc", "groups": ["admins"]},
    },
}


@pytest.fixture(scope="module")
def lib() -> SimpleNamespace:
    """Authlib, imported when these tests run (1.9 warns about its next major version's names on import)."""
    from authlib.integrations.base_client import OAuthError
    from authlib.integrations.httpx_client import OAuth2Client
    from authlib.jose import JsonWebKey, jwt
    from authlib.oauth2.rfc7636 import create_s256_code_challenge

    return SimpleNamespace(
        OAuthError=OAuthError,
        OAuth2Client=OAuth2Client,
        JsonWebKey=JsonWebKey,
        jwt=jwt,
        challenge=create_s256_code_challenge,
    )


@pytest.fixture(scope="module")
def setup(sso_folder: Path, sso_pki: LocalCA) -> Iterator[tuple[Plan, Keys, Edge]]:
    """The provider with the signing key and client secrets the secrets writer generates (`homelab render`)."""
    port = free_port()
    plan, secrets = sso_plan(sso_folder / "oidc", port, sso=SSO, kind="nginx", lan_cidrs=["127.0.0.1/32"])
    generated = secret_contents(plan, sso_folder / "oidc" / "stacks" / "secrets", {})
    keys = render_sso.keys_of(plan, generated)
    with (
        portal(plan, secrets, keys) as llng,
        sso_edge("nginx", plan, sso_folder / "edge-oidc", sso_pki, port, llng) as edge,
    ):
        yield plan, keys, edge


@pytest.fixture(scope="module")
def discovery(setup: tuple[Plan, Keys, Edge]) -> dict[str, Any]:
    plan, _, edge = setup
    with client(edge.ca_file) as http:
        response = http.get(clients(plan)["gitea"].discovery_url)
    assert response.status_code == 200, response.text[:300]
    return dict(response.json())


def test_discovery_document_is_valid_for_the_clients(
    lib: SimpleNamespace, setup: tuple[Plan, Keys, Edge], discovery: dict[str, Any]
) -> None:
    plan, keys, edge = setup
    assert discovery["issuer"] == issuer(plan).rstrip("/")
    for endpoint in (
        "authorization_endpoint",
        "token_endpoint",
        "userinfo_endpoint",
        "jwks_uri",
        "end_session_endpoint",
    ):
        assert urlsplit(discovery[endpoint])[:2] == ("https", f"auth.example.com:{edge.https_port}"), endpoint
    assert "RS256" in discovery["id_token_signing_alg_values_supported"]
    assert "code" in discovery["response_types_supported"]
    assert "S256" in discovery["code_challenge_methods_supported"]
    assert {"client_secret_basic", "client_secret_post"} & set(discovery["token_endpoint_auth_methods_supported"])
    with client(edge.ca_file) as http:
        jwks = http.get(discovery["jwks_uri"]).json()
    published = {k["kid"]: k for k in jwks["keys"]}
    ours = lib.JsonWebKey.import_key(keys.public_pem, {"kty": "RSA"}).as_dict()
    assert published["homelab-1"]["n"] == ours["n"] and published["homelab-1"]["e"] == ours["e"]
    # the key is the one the secrets writer generated (an RSA key of 3072 bits), read back from its own PEM
    generated = serialization.load_pem_private_key(keys.private_pem.encode(), password=None)
    assert isinstance(generated, rsa.RSAPrivateKey) and generated.key_size == 3072
    numbers = generated.public_key().public_numbers()
    n = int.from_bytes(base64.urlsafe_b64decode(published["homelab-1"]["n"] + "=="), "big")
    assert n == numbers.n and published["homelab-1"]["kty"] == "RSA"


def _authorize(edge: Edge, rp: Client, url: str, user: str) -> httpx.Response:
    """The user agent: from the authorization URL through the portal's sign-in, up to (not into) the app."""
    with client(edge.ca_file, follow=False) as http:
        response = http.get(url)
        for _ in range(6):
            if response.status_code == 200 and 'name="password"' in response.text:
                action, fields = form(response.text)
                fields.update(user=user, password=PASSWORDS[user])
                response = http.post(response.url.join(action or str(response.url)), data=fields)
            elif response.is_redirect and not response.headers["Location"].startswith(rp.redirect_uri):
                response = http.get(response.url.join(response.headers["Location"]))
            else:
                return response
    raise AssertionError("more than 6 steps between the app and the portal")


# Gitea's OAuth2 login source sends no PKCE code challenge (go-gitea/gitea#21376, #34747): its flow is run
# as Gitea runs it; the other apps' logins send one (S256)
SENDS_PKCE = {"nextcloud": True, "gitea": False, "jenkins": True, "grafana": True}


@pytest.mark.parametrize("app", OIDC_APPS)
def test_authorization_code_flow_as_each_app_runs_it(
    lib: SimpleNamespace, setup: tuple[Plan, Keys, Edge], discovery: dict[str, Any], app: str
) -> None:
    plan, keys, edge = setup
    rp = clients(plan)[app]
    pkce = SENDS_PKCE[app]
    oauth = lib.OAuth2Client(
        rp.client_id,
        keys.client_secrets[app],
        scope="openid profile email groups",
        redirect_uri=rp.redirect_uri,
        code_challenge_method="S256" if pkce else None,
        transport=transport(edge.ca_file),
    )
    verifier = "v" * 20 + "-pkce-verifier-of-the-test-0123456789" if pkce else None
    url, state = oauth.create_authorization_url(
        discovery["authorization_endpoint"], code_verifier=verifier, nonce="n-1"
    )
    landed = _authorize(edge, rp, url, "alice")
    assert landed.is_redirect, (landed.status_code, landed.text[:300])
    callback = landed.headers["Location"]
    assert callback.startswith(rp.redirect_uri + "?")
    assert parse_qs(urlsplit(callback).query)["state"] == [state]
    token = oauth.fetch_token(discovery["token_endpoint"], authorization_response=callback, code_verifier=verifier)
    with client(edge.ca_file) as http:
        jwks = http.get(discovery["jwks_uri"]).json()
    claims = lib.jwt.decode(
        token["id_token"],
        lib.JsonWebKey.import_key_set(jwks),
        claims_options={
            "iss": {"essential": True, "value": discovery["issuer"]},
            "aud": {"essential": True, "value": rp.client_id},
        },
    )
    claims.validate()
    assert claims.header["alg"] == "RS256" and claims.header["kid"] == "homelab-1"  # never "none", never HS*
    assert claims["nonce"] == "n-1"
    assert claims["sub"] == "alice"
    info = oauth.get(discovery["userinfo_endpoint"]).json()
    assert info["sub"] == "alice" and info["email"] == "alice@example.com" and info["preferred_username"] == "alice"
    assert info["groups"] == ["family", "admins"]


@pytest.mark.parametrize("app", [app for app in OIDC_APPS if SENDS_PKCE[app]])
def test_pkce_is_required_and_checked(
    lib: SimpleNamespace, setup: tuple[Plan, Keys, Edge], discovery: dict[str, Any], app: str
) -> None:
    plan, keys, edge = setup
    rp = clients(plan)[app]
    oauth = lib.OAuth2Client(
        rp.client_id,
        keys.client_secrets[app],
        scope="openid",
        redirect_uri=rp.redirect_uri,
        transport=transport(edge.ca_file),
    )
    plain, _ = oauth.create_authorization_url(discovery["authorization_endpoint"])  # no code_challenge
    refused = _authorize(edge, rp, plain, "alice")
    assert not refused.headers.get("Location", "").startswith(rp.redirect_uri + "?code="), refused.headers
    challenge = lib.challenge("right-verifier-" + "x" * 40)
    url, _ = oauth.create_authorization_url(
        discovery["authorization_endpoint"], code_challenge=challenge, code_challenge_method="S256"
    )
    callback = _authorize(edge, rp, url, "alice").headers["Location"]
    with pytest.raises(lib.OAuthError, match=r"invalid_grant|invalid_request"):
        oauth.fetch_token(
            discovery["token_endpoint"], authorization_response=callback, code_verifier="wrong-" + "y" * 40
        )


def test_redirect_uri_and_groups_are_enforced(
    lib: SimpleNamespace, setup: tuple[Plan, Keys, Edge], discovery: dict[str, Any]
) -> None:
    plan, keys, edge = setup
    rp = clients(plan)["jenkins"]  # admins only
    oauth = lib.OAuth2Client(
        rp.client_id,
        keys.client_secrets["jenkins"],
        scope="openid",
        redirect_uri="https://evil.example.net/cb",
        code_challenge_method="S256",
        transport=transport(edge.ca_file),
    )
    url, _ = oauth.create_authorization_url(discovery["authorization_endpoint"], code_verifier="z" * 50)
    stolen = _authorize(edge, rp, url, "alice")
    assert "evil.example.net" not in stolen.headers.get("Location", "")
    oauth.redirect_uri = rp.redirect_uri
    url, _ = oauth.create_authorization_url(discovery["authorization_endpoint"], code_verifier="z" * 50)
    outsider = _authorize(edge, rp, url, "bob")  # bob is not in admins
    assert "code=" not in outsider.headers.get("Location", ""), (outsider.status_code, outsider.headers)


def test_grafana_signs_in_with_its_rendered_generic_oauth_settings(
    lib: SimpleNamespace, setup: tuple[Plan, Keys, Edge], discovery: dict[str, Any]
) -> None:
    """Grafana's GF_AUTH_GENERIC_OAUTH_* variables as rendered into its service, used as Grafana uses them
    ([auth.generic_oauth]: auth_url, token_url, api_url, scopes, use_pkce, the *_attribute_path claims, the
    client secret from the file compose mounts), against the real provider."""
    plan, keys, edge = setup
    grafana = plan.stacks["monitoring"].services["grafana"]
    env = {k.removeprefix("GF_AUTH_GENERIC_OAUTH_"): v for k, v in grafana.environment.items()}
    assert env["ENABLED"] == "true" and "CLIENT_SECRET" not in env  # the secret only by file
    secret_name = PurePosixPath(env["CLIENT_SECRET__FILE"]).name
    assert env["CLIENT_SECRET__FILE"] == f"/run/secrets/{secret_name}" and (secret_name, None) in grafana.secrets
    assert (env["AUTH_URL"], env["TOKEN_URL"], env["API_URL"]) == (
        discovery["authorization_endpoint"],
        discovery["token_endpoint"],
        discovery["userinfo_endpoint"],
    )
    # Grafana's callback is its root URL + login/generic_oauth; the provider's client has that URI (with the
    # edge's test port: the example's root URL names none)
    rp = clients(plan)["grafana"]
    callback = urlsplit(rp.redirect_uri)
    assert grafana.environment["GF_SERVER_ROOT_URL"] + "login/generic_oauth" == (
        f"https://{callback.hostname}{callback.path}"
    )
    oauth = lib.OAuth2Client(
        env["CLIENT_ID"],
        keys.client_secrets[secret_name.removeprefix("sso_oidc_")],
        scope=env["SCOPES"],
        redirect_uri=rp.redirect_uri,
        code_challenge_method="S256" if env["USE_PKCE"] == "true" else None,
        transport=transport(edge.ca_file),
    )
    verifier = "g" * 30 + "-grafana-pkce-verifier-0123456789"
    url, _ = oauth.create_authorization_url(env["AUTH_URL"], code_verifier=verifier)
    landed = _authorize(edge, rp, url, "alice")
    assert landed.is_redirect and landed.headers["Location"].startswith(rp.redirect_uri + "?"), landed.headers
    assert "code" in parse_qs(urlsplit(landed.headers["Location"]).query)
    oauth.fetch_token(env["TOKEN_URL"], authorization_response=landed.headers["Location"], code_verifier=verifier)
    info = oauth.get(env["API_URL"]).json()
    assert info[env["LOGIN_ATTRIBUTE_PATH"]] == "alice"
    assert info[env["EMAIL_ATTRIBUTE_PATH"]] == "alice@example.com"
    assert info[env["NAME_ATTRIBUTE_PATH"]] and "admins" in info[env["GROUPS_ATTRIBUTE_PATH"]]
