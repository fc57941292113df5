"""The real LemonLDAP::NG (Debian's 2.16 packages) on loopback with the configuration homelab renders,
in front of the web server homelab renders for it, and an HTTP client that reaches every name on
127.0.0.1 with the real host name in SNI, Host and cookies (so cookie domains and redirects are real).

Changed for the test, and nothing else: the folders (a scratch folder the unprivileged FastCGI server
can read), the listen addresses, and the FastCGI server's address in the web server's configuration.
"""

from __future__ import annotations

import contextlib
import html.parser
import json
import os
import shutil
import socket
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpcore
import httpx
import yaml

from homelab.config.loaded import LoadedConfig
from homelab.config.loader import load
from homelab.plan import build_plan
from homelab.plan_model import Plan
from homelab.render import sso as render_sso
from homelab.render.sso_oidc import Keys
from homelab.secrets import user_secret_values
from homelab.sso_passwd import write_hash
from tests.conftest import EXAMPLE, EXAMPLE_SECRETS, write_secret
from tests.contract.edge_support import (
    Edge,
    LocalCA,
    free_port,
    nginx_config_for_test,
    nginx_edge,
    nginx_worker_user,
    program,
    running,
    scratch_folder,
    traefik_edge,
    wait_until,
)

PASSWORDS = {
    "alice": "alice's long password",
    "bob": "bob's long password!",
    "carol": "carol's long password",
    "dave": "dave's long password",
}
SSO_CONFIG: dict[str, Any] = {
    "enabled": True,
    "groups": ["family", "admins"],
    "session_hours": 2,
    "users": {
        "alice": {
            "password_file": "secrets/sso-alice",
            "groups": ["family", "admins"],
            "email": "alice@example.com",
            "name": "Alice A",
        },
        "bob": {"password_file": "secrets/sso-bob", "groups": ["family"], "email": "bob@example.com"},
        "carol": {"password_file": "secrets/sso-carol", "groups": ["admins"], "totp": True},
        "dave": {"password_file": "secrets/sso-dave", "groups": ["admins", "family"], "totp": True},
    },
    "apps": {
        "nextcloud": {"access": "forward-auth"},
        "gitea": {"access": "forward-auth", "groups": ["family"]},
        "rstudio": {"access": "forward-auth", "groups": ["admins"]},
        "jenkins": {"access": "oidc"},
        "plex": {"access": "none"},
    },
}


def sso_plan(
    folder: Path, https_port: int, sso: dict[str, Any] | None = None, **edge: Any
) -> tuple[Plan, dict[str, str]]:
    """The bundled example with SSO_CONFIG, its edge on `https_port`; passwords set by `homelab sso
    passwd`'s library call. Returns the plan and the user secret values (the hashes)."""
    data = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    data["edge"].update(edge, https_port=https_port)
    if data["edge"].get("kind") == "nginx":
        data["domain"]["acme"]["challenge"] = "http"
    data["sso"] = sso or SSO_CONFIG
    loaded = sso_config_folder(folder, data)
    return build_plan(loaded), user_secret_values(loaded)


def sso_config_folder(folder: Path, data: dict[str, Any]) -> LoadedConfig:
    """`data` as homelab.yaml in `folder`, with the example's secrets and the SSO users' password hashes
    (written by `homelab sso passwd`'s library call), loaded."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "homelab.yaml").write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    for name in EXAMPLE_SECRETS:
        write_secret(folder / "secrets" / name, f"example-{name}-value")
    for user, password in PASSWORDS.items():
        write_hash(folder / "secrets" / f"sso-{user}", password)
    return load(folder / "homelab.yaml")


@dataclass
class Portal:
    portal_port: int  # the web server's portal listener (the edge's upstream for the portal's name)
    auth_port: int  # its forward-auth listener
    folder: Path

    def log(self, tail: int = 3000) -> str:
        return "".join(
            p.read_text(errors="replace")[-tail:]
            for p in (self.folder / "llng.log", self.folder / "error.log")
            if p.exists()
        )


@contextlib.contextmanager
def portal(plan: Plan, secret_values: dict[str, str], keys: Keys | None = None) -> Iterator[Portal]:
    """llng-fastcgi-server (as the unprivileged worker user) and nginx with the rendered configuration."""
    server, nginx = program("llng-fastcgi-server"), program("nginx")
    user = nginx_worker_user()
    with scratch_folder() as root:
        paths = render_sso.Paths(
            conf_dir=str(root / "conf"),
            sessions=str(root / "sessions"),
            psessions=str(root / "psessions"),
            cache=str(root / "cache"),
            users_file=str(root / "users.json"),
            perl_dir=str(root / "perl"),
        )
        for sub in ("conf", "sessions/lock", "psessions/lock", "cache", "run"):
            (root / sub).mkdir(parents=True)
        (root / "conf" / "lmConf-1.json").write_text(render_sso.conf_json(plan, paths, keys))
        (root / "users.json").write_text(json.dumps(render_sso.users(plan, secret_values)))
        (root / "lemonldap-ng.ini").write_text(render_sso.lemonldap_ng_ini(paths))
        (root / "traefik.psgi").write_text(render_sso.traefik_psgi())
        for relative, text in render_sso.perl_modules().items():
            (root / "perl" / relative).parent.mkdir(parents=True, exist_ok=True)
            (root / "perl" / relative).write_text(text)
        fastcgi, portal_port, auth_port = free_port(), free_port(), free_port()
        web = render_sso.web_conf(
            plan,
            fastcgi=f"127.0.0.1:{fastcgi}",
            portal_listen=f"127.0.0.1:{portal_port}",
            auth_listen=f"127.0.0.1:{auth_port}",
            paths=paths,
            psgi_dir=str(root),
            worker_user=user,
        )
        (root / "nginx.conf").write_text(nginx_config_for_test(web, root, root))
        shutil.chown(root, user)
        for path in root.rglob("*"):
            shutil.chown(path, user)
        env = {**os.environ, "LLNG_DEFAULTCONFFILE": str(root / "lemonldap-ng.ini"), "PERL5LIB": paths.perl_dir}
        llng = [
            server,
            "--foreground",
            "--listen",
            f"127.0.0.1:{fastcgi}",
            "-p",
            str(root / "run" / "llng.pid"),
            "-n",
            "2",
        ]
        if os.geteuid() == 0:
            llng += ["-u", user, "-g", user]
        with (
            running(llng, root / "llng.log", root, env) as llng_process,
            running(
                [
                    nginx,
                    "-e",
                    str(root / "error.log"),
                    "-p",
                    str(root),
                    "-c",
                    str(root / "nginx.conf"),
                    "-g",
                    "daemon off;",
                ],
                root / "nginx.out",
                root,
            ),
        ):
            result = Portal(portal_port, auth_port, root)

            def up() -> bool:
                return _status(portal_port, render_sso.portal_host(plan.config)) == 200

            try:
                wait_until(up, "the portal to answer", llng_process, timeout=30)
            except AssertionError as exc:  # the first errors are the cause; the last ones repeat them
                errors = [line for line in result.log(1 << 20).splitlines() if "[error]" in line]
                raise AssertionError(f"{exc}\n" + "\n".join(dict.fromkeys(errors))) from None
            yield result


def _status(port: int, host: str) -> int:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(f"GET / HTTP/1.0\r\nHost: {host}\r\n\r\n".encode())
        return int(sock.recv(64).split(b" ", 2)[1])


# --- the client ----------------------------------------------------------------------------------


class _Loopback(httpcore.SyncBackend):
    """Every name resolves to 127.0.0.1 (the edge); TLS still sees the real name."""

    def connect_tcp(self, host: str, port: int, *args: Any, **kwargs: Any) -> httpcore.NetworkStream:
        return super().connect_tcp("127.0.0.1", port, *args, **kwargs)


def transport(ca_file: Path) -> httpx.HTTPTransport:
    """httpx's transport with every name on 127.0.0.1, trusting the test CA."""
    context = ssl.create_default_context(cafile=str(ca_file))
    transport = httpx.HTTPTransport(verify=context)
    transport._pool = httpcore.ConnectionPool(  # the one way to give httpx a resolver
        ssl_context=context, network_backend=_Loopback()
    )
    return transport


def client(ca_file: Path, follow: bool = True) -> httpx.Client:
    return httpx.Client(transport=transport(ca_file), follow_redirects=follow, max_redirects=5, timeout=15)


class _Form(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.action: str | None = None
        self.fields: dict[str, str] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "form" and self.action is None:
            self.action = a.get("action") or ""
        if tag == "input" and a.get("name"):
            self.fields[a["name"] or ""] = a.get("value") or ""


def form(page: str) -> tuple[str, dict[str, str]]:
    """The first form of a page: its action and its inputs' names and values."""
    parser = _Form()
    parser.feed(page)
    return parser.action or "", parser.fields


def sign_in(http: httpx.Client, url: str, user: str, password: str) -> httpx.Response:
    """Ask for `url`, land on the portal, post the login form: the response after the redirects."""
    page = http.get(url)
    assert page.status_code == 200 and 'name="password"' in page.text, (page.status_code, page.url, page.text[:500])
    action, fields = form(page.text)
    fields.update(user=user, password=password)
    return http.post(page.url.join(action or str(page.url)), data=fields)


@contextlib.contextmanager
def sso_edge(kind: str, plan: Plan, folder: Path, pki: LocalCA, port: int, llng: Portal) -> Iterator[Edge]:
    """The real edge of `kind` with the rendered configuration on `port`, the portal's name and the
    forward-auth handler pointing at the running portal; the apps are local stand-ins."""
    if kind == "nginx":
        running = nginx_edge(
            plan,
            folder,
            pki,
            https_port=port,
            upstreams={"sso": f"127.0.0.1:{llng.portal_port}"},
            sso_auth=f"127.0.0.1:{llng.auth_port}",
        )
    else:

        def handler(dynamic: dict[str, Any]) -> None:
            dynamic["http"]["middlewares"]["sso"]["forwardAuth"]["address"] = (
                f"http://127.0.0.1:{llng.auth_port}/traefik"
            )

        running = traefik_edge(
            plan,
            folder,
            pki,
            https_port=port,
            backend_urls={"sso": f"http://127.0.0.1:{llng.portal_port}"},
            tweak_dynamic=handler,
        )
    with running as started:
        yield started
