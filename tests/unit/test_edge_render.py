"""Edge rendering details that do not need a running proxy."""

from __future__ import annotations

from pathlib import Path

from homelab.config.loader import load
from homelab.plan import build_plan
from homelab.render import edge_nginx, edge_traefik


def _plan(example_config: Path, https_port: int, kind: str = "traefik"):
    text = example_config.read_text().replace("https_port: 443", f"https_port: {https_port}")
    if kind == "nginx":
        text = text.replace("kind: traefik", "kind: nginx").replace("challenge: tls", "challenge: http")
    example_config.write_text(text)
    return build_plan(load(example_config))


def _redirect(plan) -> str:
    return edge_traefik.static_config(plan)["entryPoints"]["web"]["http"]["redirections"]["entryPoint"]["to"]


def test_traefik_redirects_to_the_public_https_port(example_config: Path) -> None:
    assert _redirect(_plan(example_config, 443)) == "websecure"


def test_traefik_redirect_names_a_non_standard_public_port(example_config: Path) -> None:
    assert _redirect(_plan(example_config, 8443)) == ":8443"


def test_nginx_redirects_name_a_non_standard_public_port(example_config: Path) -> None:
    conf = edge_nginx.nginx_conf(_plan(example_config, 8443, kind="nginx"))
    assert "return 301 https://$host:8443$request_uri;" in conf
    assert "return 301 https://$host:8443/remote.php/dav/;" in conf


def test_nginx_redirects_on_the_standard_port(example_config: Path) -> None:
    conf = edge_nginx.nginx_conf(_plan(example_config, 443, kind="nginx"))
    assert "return 301 https://$host$request_uri;" in conf
