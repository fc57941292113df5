"""The portal's rendered configuration, checked for what must hold whatever LemonLDAP::NG does with it (the
real portal runs it in tests/contract/test_sso_*.py): secrets only as hashes, cookie flags, who is
guarded, the OIDC clients' documented callbacks, a configuration date that follows the content."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from homelab.config.loader import load
from homelab.plan import build_plan
from homelab.plan_model import Plan
from homelab.render import sso
from homelab.render.edge_nginx import nginx_conf
from homelab.render.edge_traefik import dynamic_config, route_labels
from homelab.render.sso_oidc import Keys, provider
from homelab.secrets import user_secret_values
from homelab.sso_passwd import hash_password
from homelab.sso_routes import clients
from tests.conftest import write_secret

PASSWORD = "a long enough password"
HASH = hash_password(PASSWORD)  # once: bcrypt is slow on purpose


def _plan(folder: Path, **changes: object) -> tuple[Plan, dict[str, str]]:
    data = yaml.safe_load((folder / "homelab.yaml").read_text())
    data["edge"]["https_port"] = 8443
    data["sso"] = {
        "enabled": True,
        "session_hours": 3,
        "groups": ["family", "admins"],
        "users": {
            "alice": {"password_file": "secrets/sso-alice", "groups": ["admins"], "totp": True},
            "bob": {"password_file": "secrets/sso-bob", "groups": ["family"]},
        },
        "apps": {
            "nextcloud": {"access": "forward-auth", "groups": ["family"]},
            "grafana": {"access": "forward-auth"},
            "gitea": {"access": "oidc"},
            "jenkins": {"access": "oidc", "groups": ["admins"]},
            "plex": {"access": "none"},
        },
        **changes,
    }
    (folder / "homelab.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    for user in ("alice", "bob"):
        write_secret(folder / "secrets" / f"sso-{user}", HASH)
    loaded = load(folder / "homelab.yaml")
    return build_plan(loaded), user_secret_values(loaded)


def test_users_file_holds_hashes_groups_and_no_password(example_dir: Path) -> None:
    plan, secrets = _plan(example_dir)
    users = sso.users(plan, secrets)
    assert set(users) == {"alice", "bob"}
    assert users["bob"]["groups"] == ["family"] and users["bob"]["hash"].startswith("$2b$12$")
    assert PASSWORD not in json.dumps(users)


def test_portal_configuration(example_dir: Path) -> None:
    plan, _ = _plan(example_dir)
    conf = json.loads(sso.conf_json(plan))
    assert conf["portal"] == "https://auth.example.com:8443/"
    assert (conf["securedCookie"], conf["httpOnly"], conf["sameSite"]) == (1, 1, "Lax")
    assert conf["timeout"] == 3 * 3600 and conf["domain"] == "example.com"
    assert set(conf["locationRules"]) == {"cloud.example.com", "grafana.example.com", "auth.example.com"}
    assert conf["locationRules"]["cloud.example.com"]["default"] == 'inGroup("family")'
    assert conf["locationRules"]["grafana.example.com"]["default"] == "1"
    assert conf["sfRequired"] == '$uid eq "alice"'
    assert conf["issuerDBOpenIDConnectActivation"] == 0  # no keys handed over: no provider
    assert "PASSWORD" not in json.dumps(conf) and "$2b$" not in json.dumps(conf)


def test_configuration_date_follows_the_content(example_dir: Path) -> None:
    plan, _ = _plan(example_dir)
    first = json.loads(sso.conf_json(plan))["cfgDate"]
    assert json.loads(sso.conf_json(plan))["cfgDate"] == first
    longer, _ = _plan(example_dir, session_hours=4)
    assert json.loads(sso.conf_json(longer))["cfgDate"] != first


def test_oidc_clients_use_each_apps_documented_callback(example_dir: Path) -> None:
    plan, _ = _plan(example_dir)
    found = clients(plan)
    assert set(found) == {"gitea", "jenkins"}
    assert found["gitea"].redirect_uri == "https://git.example.com:8443/user/oauth2/homelab/callback"
    assert found["jenkins"].redirect_uri == "https://ci.example.com:8443/securityRealm/finishLogin"
    assert found["gitea"].discovery_url == "https://auth.example.com:8443/.well-known/openid-configuration"
    keys = Keys("PRIVATE", "PUBLIC", {"gitea": "s1", "jenkins": "s2"})
    rps = provider(plan, keys)["oidcRPMetaDataOptions"]
    assert rps["jenkins"]["oidcRPMetaDataOptionsRule"] == 'inGroup("admins")'
    # Gitea's OAuth2 login source sends no code challenge (go-gitea/gitea#21376): its client cannot require one
    assert {app: rp["oidcRPMetaDataOptionsRequirePKCE"] for app, rp in rps.items()} == {
        app: int(app != "gitea") for app in rps
    }


def test_edges_guard_only_forward_auth_routes(example_dir: Path) -> None:
    plan, _ = _plan(example_dir)
    text = nginx_conf(plan)
    cloud = text[text.index("server_name cloud.example.com;") :].split("\n    }\n", 1)[0]
    assert "auth_request /.homelab-sso-auth;" in cloud and "^/remote\\.php/" in cloud
    git = text[text.index("server_name git.example.com;") :].split("\n    }\n", 1)[0]
    assert "auth_request" not in git and 'proxy_set_header Remote-User "";' in git
    assert "server sso:8080;" in text
    assert route_labels(plan, next(r for r in plan.routes if r.app == "nextcloud"))[
        "traefik.http.routers.nextcloud.middlewares"
    ].endswith("sso@file")
    gitea = route_labels(plan, next(r for r in plan.routes if r.app == "gitea"))
    assert "sso@file" not in gitea.get("traefik.http.routers.gitea.middlewares", "")
    middlewares = dynamic_config(plan)["http"]["middlewares"]
    assert middlewares["sso"]["forwardAuth"]["trustForwardHeader"] is False
    assert middlewares["secure-headers"]["headers"]["customRequestHeaders"]["Remote-User"] == ""
