"""Contract: single sign-on as rendered, for real. Debian's LemonLDAP::NG 2.16 runs the rendered portal
configuration (users file, Perl password check, lemonldap-ng.ini, its web server); the real NGINX edge and
the real Traefik edge run their rendered configuration in front of local app stand-ins. The client
(httpx) follows redirects like a browser, with the real names in SNI, Host and cookies.

The portal runs once for the session (tests/contract/conftest.py); each edge kind in turn on the same port.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from homelab.plan_model import Plan
from tests.contract.edge_support import Edge, LocalCA, free_port
from tests.contract.sso_support import PASSWORDS, Portal, client, form, sign_in, sso_edge

pytestmark = pytest.mark.real

CLOUD, GIT, STUDIO, MEDIA = "cloud.example.com", "git.example.com", "rstudio.example.com", "plex.example.com"
PORTAL = "auth.example.com"


@pytest.fixture(scope="module", params=["nginx", "traefik"])
def sso_edge_kind(request: pytest.FixtureRequest) -> str:
    """Every test here on both edges (the `edge` fixture of tests/contract/conftest.py)."""
    return str(request.param)


def url(edge: Edge, host: str, path: str = "/") -> str:
    return f"https://{host}:{edge.https_port}{path}"


def identity(response: httpx.Response) -> dict[str, str]:
    """The Remote-* headers the app stand-in received."""
    return dict(json.loads(response.headers["X-Backend-Identity"]))


def test_unauthenticated_request_goes_to_the_portal(edge: Edge, llng: Portal) -> None:
    with client(edge.ca_file, follow=False) as http:
        first = http.get(url(edge, CLOUD, "/apps/files/?dir=/Photos&x=a%20b"))
    assert first.status_code == 302, (first.status_code, first.text[:300], llng.log())
    target = urlsplit(first.headers["Location"])
    assert (target.scheme, target.netloc) == ("https", f"{PORTAL}:{edge.https_port}")
    back = base64.b64decode(parse_qs(target.query)["url"][0]).decode()
    assert back == url(edge, CLOUD, "/apps/files/?dir=/Photos&x=a%20b")


def test_sign_in_returns_to_the_exact_page_with_the_users_identity(edge: Edge, llng: Portal) -> None:
    asked = url(edge, CLOUD, "/apps/files/?dir=/Photos&x=a%20b")
    with client(edge.ca_file) as http:
        response = sign_in(http, asked, "alice", PASSWORDS["alice"])
        assert response.status_code == 200, (response.status_code, response.url, response.text[:400], llng.log())
        assert str(response.url) == asked
        assert response.text == "nextcloud GET /apps/files/?dir=/Photos&x=a%20b 0 https\n"
        assert len(response.history) <= 3, [str(r.url) for r in response.history]  # post -> app, no loop
        assert identity(response) == {
            "Remote-User": "alice",
            "Remote-Groups": "family; admins",
            "Remote-Email": "alice@example.com",
            "Remote-Name": "Alice A",
        }
        # one session for every app: another guarded app lets alice in without a portal visit
        studio = http.get(url(edge, STUDIO, "/s/1"))
        assert studio.status_code == 200 and not studio.history and identity(studio)["Remote-User"] == "alice"


def test_session_cookie_is_secure_httponly_samesite_for_the_domain(edge: Edge) -> None:
    with client(edge.ca_file) as http:
        response = sign_in(http, url(edge, GIT, "/"), "bob", PASSWORDS["bob"])
        assert response.status_code == 200
        cookies = [h for r in (*response.history, response) for h in r.headers.get_list("set-cookie")]
    session = [
        c for c in cookies if c.startswith("homelab_sso=") and c.split(";")[0] not in ("homelab_sso=0", "homelab_sso=")
    ]
    assert session, cookies
    attributes = {part.strip().split("=")[0].lower(): part.strip() for part in session[0].split(";")[1:]}
    assert {"secure", "httponly", "samesite", "domain"} <= attributes.keys(), session[0]
    assert attributes["samesite"].lower() == "samesite=lax"
    assert attributes["domain"].lower() in ("domain=example.com", "domain=.example.com")


def test_wrong_password_and_unknown_user_are_refused(edge: Edge) -> None:
    for user, password in (("bob", PASSWORDS["alice"]), ("bob", ""), ("mallory", PASSWORDS["bob"])):
        with client(edge.ca_file) as http:
            response = sign_in(http, url(edge, CLOUD, "/x"), user, password)
            assert response.status_code in (200, 401), response.status_code
            assert urlsplit(str(response.url)).hostname == PORTAL
            assert 'name="password"' in response.text  # the form again
            assert "homelab_sso" not in {c.name for c in http.cookies.jar if c.value not in ("", "0")}
            again = http.get(url(edge, CLOUD, "/x"))
            assert urlsplit(str(again.url)).hostname == PORTAL


def test_user_outside_the_apps_groups_gets_403(edge: Edge) -> None:
    with client(edge.ca_file) as http:
        assert sign_in(http, url(edge, CLOUD, "/"), "bob", PASSWORDS["bob"]).status_code == 200
        refused = http.get(url(edge, STUDIO, "/"))
        assert refused.status_code == 403
        assert "rstudio GET" not in refused.text
        assert http.get(url(edge, GIT, "/")).status_code == 200  # bob's group (family) is let in there


def test_logout_ends_access_to_every_app(edge: Edge) -> None:
    with client(edge.ca_file) as http:
        assert sign_in(http, url(edge, CLOUD, "/"), "alice", PASSWORDS["alice"]).status_code == 200
        assert http.get(url(edge, STUDIO, "/")).status_code == 200
        out = http.get(url(edge, PORTAL, "/?logout=1"))
        assert out.status_code == 200
        for host in (CLOUD, STUDIO, GIT):
            after = http.get(url(edge, host, "/private"))
            assert urlsplit(str(after.url)).hostname == PORTAL, (host, after.status_code, str(after.url))
            assert 'name="password"' in after.text


@pytest.mark.parametrize(
    ("host", "path"),
    [
        (CLOUD, "/remote.php/dav/files/alice/a.txt"),
        (CLOUD, "/public.php/webdav/"),
        (CLOUD, "/ocs/v2.php/cloud/capabilities?format=json"),
        (CLOUD, "/login/v2"),
        (CLOUD, "/index.php/login/v2/poll"),
        (CLOUD, "/status.php"),
        (GIT, "/alice/dotfiles.git/info/refs?service=git-upload-pack"),
        (GIT, "/alice/dotfiles/git-upload-pack"),
        (GIT, "/api/v1/repos/alice/dotfiles"),
        (GIT, "/api/healthz"),
    ],
)
def test_bypass_paths_reach_the_app_without_a_session(edge: Edge, host: str, path: str) -> None:
    with client(edge.ca_file, follow=False) as http:
        response = http.get(url(edge, host, path), headers={"Remote-User": "admin", "Remote-Groups": "admins"})
    assert response.status_code == 200, (response.status_code, response.headers.get("location"))
    assert response.text.split(" ")[1:3] == ["GET", path]
    assert identity(response) == {}  # the spoofed identity never reaches the app, signed in or not


@pytest.mark.parametrize(
    ("host", "path"),
    [
        (CLOUD, "/"),
        (CLOUD, "/index.php/apps/files"),
        (CLOUD, "/remote.phpx/dav"),
        (CLOUD, "/status.php.bak"),
        (CLOUD, "/apps/remote.php/dav"),
        (CLOUD, "/remote.php/../index.php/settings"),
        (CLOUD, "/remote.php/%2e%2e/index.php/settings"),
        (GIT, "/alice/dotfiles/settings"),
        (GIT, "/alice/dotfiles.git/config"),
        (GIT, "/apis/v1"),
        (GIT, "/user/login?redirect_to=/api/"),
        (STUDIO, "/remote.php/dav"),
        (STUDIO, "/api/v1"),
    ],
)
def test_everything_else_needs_the_portal(edge: Edge, host: str, path: str) -> None:
    with client(edge.ca_file, follow=False) as http:
        response = http.get(url(edge, host, path))
    assert response.status_code == 302, (host, path, response.status_code, response.text[:200])
    assert urlsplit(response.headers["Location"]).hostname == PORTAL


def test_spoofed_identity_headers_are_stripped_on_every_route(edge: Edge) -> None:
    spoof = {
        "Remote-User": "admin",
        "Remote-Groups": "admins",
        "Remote-Email": "root@example.com",
        "Remote-Name": "Root",
    }
    with client(edge.ca_file) as http:
        unguarded = http.get(url(edge, MEDIA, "/web"), headers=spoof)  # plex: its own login, no forward-auth
        assert unguarded.status_code == 200 and identity(unguarded) == {}
        assert sign_in(http, url(edge, GIT, "/"), "bob", PASSWORDS["bob"]).status_code == 200
        guarded = http.get(url(edge, GIT, "/explore"), headers=spoof)
        assert guarded.status_code == 200
        assert identity(guarded) == {
            "Remote-User": "bob",
            "Remote-Groups": "family",
            "Remote-Email": "bob@example.com",
            "Remote-Name": "bob",
        }


def test_no_redirect_loop_on_any_route(edge: Edge, sso_plans: dict[str, tuple[Plan, dict[str, str]]]) -> None:
    """Every public name, without a session and with a forged one, ends on a page within two redirects."""
    plan, _ = sso_plans["nginx"]
    for route in plan.routes:
        if route.lan_only:
            continue
        for cookies in ({}, {"homelab_sso": "0" * 64}):
            with client(edge.ca_file) as http:
                http.cookies.update(cookies)
                response = http.get(url(edge, route.host, "/deep/page?q=1"))
            assert response.status_code == 200, (route.host, response.status_code)
            assert len(response.history) <= 2, (route.host, [str(r.url) for r in response.history])


def test_the_portal_login_form_posts_to_the_portal(edge: Edge) -> None:
    with client(edge.ca_file) as http:
        page = http.get(url(edge, PORTAL, "/"))
    action, fields = form(page.text)
    assert page.status_code == 200 and {"user", "password"} <= fields.keys()
    assert urlsplit(str(page.url.join(action))).hostname == PORTAL


@pytest.mark.parametrize("kind", ["nginx", "traefik"])
def test_sso_down_keeps_guarded_apps_closed_and_bypasses_open(
    kind: str,
    sso_plans: dict[str, tuple[Plan, dict[str, str]]],
    llng: Portal,
    sso_folder: Path,
    sso_pki: LocalCA,
) -> None:
    """The handler's address answers nothing (the portal's container stopped): no guarded page is served."""
    down = Portal(llng.portal_port, free_port(), llng.folder)  # a port nothing listens on
    with (
        # its own port: the module's edges may still hold sso_port (no redirect to the portal is followed here)
        sso_edge(kind, sso_plans[kind][0], sso_folder / f"down-{kind}", sso_pki, free_port(), down) as edge,
        client(edge.ca_file, follow=False) as http,
    ):
        closed = http.get(url(edge, CLOUD, "/apps/files/"))
        assert closed.status_code >= 500 and "nextcloud GET" not in closed.text, closed.status_code
        if kind == "nginx":
            assert closed.status_code == 503 and "single sign-on portal does not answer" in closed.text
        webdav = http.get(url(edge, CLOUD, "/remote.php/dav/files/alice/"))
        assert webdav.status_code == 200 and webdav.text.startswith("nextcloud GET /remote.php/dav/")


@pytest.mark.parametrize(
    "target",
    ["https://evil.example.net/steal", "https://example.com.evil.net/", "//evil.example.net/", "javascript:alert(1)"],
)
def test_the_portal_sends_nobody_to_a_foreign_site(edge: Edge, target: str) -> None:
    """The `url` the portal returns to after sign-in must be one of the protected names (no open redirect)."""
    asked = url(edge, PORTAL, "/?url=" + base64.b64encode(target.encode()).decode())
    with client(edge.ca_file, follow=False) as http:
        page = http.get(asked)
        action, fields = form(page.text)
        fields.update(user="alice", password=PASSWORDS["alice"])
        response = http.post(page.url.join(action or str(page.url)), data=fields)
        for _ in range(3):
            location = response.headers.get("Location", "")
            assert "evil" not in location and not location.startswith("javascript"), location
            if not response.is_redirect:
                break
            response = http.get(response.url.join(location))
        assert response.status_code in (200, 302, 303)


def test_client_forwarded_headers_cannot_name_another_page(edge: Edge) -> None:
    """The portal judges the page asked for, not one a client names in X-Forwarded-Uri/-Host."""
    spoof = {"X-Forwarded-Uri": "/remote.php/dav/", "X-Forwarded-Host": "plex.example.com", "X-Original-URI": "/ocs/"}
    with client(edge.ca_file, follow=False) as http:
        response = http.get(url(edge, CLOUD, "/index.php/apps/files"), headers=spoof)
    assert response.status_code == 302 and urlsplit(response.headers["Location"]).hostname == PORTAL


def test_an_unknown_login_takes_as_long_as_a_wrong_password(edge: Edge) -> None:
    """Both do the bcrypt work (no answer tells which logins exist), and both are refused alike."""
    import time

    def attempt(user: str) -> float:
        with client(edge.ca_file) as http:
            page = http.get(url(edge, PORTAL, "/"))
            action, fields = form(page.text)
            fields.update(user=user, password="not the password at all")
            started = time.monotonic()
            response = http.post(page.url.join(action or str(page.url)), data=fields)
            elapsed = time.monotonic() - started
            assert 'name="password"' in response.text
            return elapsed

    known, unknown = min(attempt("bob") for _ in range(2)), min(attempt("nobody-here") for _ in range(2))
    assert unknown > 0.5 * known, (known, unknown)
