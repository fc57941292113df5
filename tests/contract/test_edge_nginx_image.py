"""The NGINX that the contract tests run is the NGINX that ships: the edge image is built from the
Debian package the tests install (scripts/apt/edge.txt), on the Debian release the test machines run.
No program runs here: this checks the rendered Dockerfile and compose service against those lists."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from homelab.render import Rendering
from homelab.render.edge_nginx import render
from tests.contract.edge_support import example_plan

REPO = Path(__file__).resolve().parents[2]


def _apt_packages(path: Path) -> set[str]:
    return {line.split("#")[0].strip() for line in path.read_text().splitlines()} - {""}


def test_edge_image_installs_the_tested_debian_package(tmp_path: Path) -> None:
    rendering = Rendering()
    render(example_plan(tmp_path / "example", kind="nginx"), rendering)
    dockerfile = rendering.files["edge/nginx/Dockerfile"].decode()
    assert re.search(r"^FROM debian:bookworm-slim$", dockerfile, re.MULTILINE)
    installed = re.search(r"apt-get install -y --no-install-recommends ([^\\&]+)", dockerfile)
    assert installed is not None, dockerfile
    nginx_packages = {p for p in installed.group(1).split() if p.startswith("nginx")}
    assert nginx_packages == {"nginx-light"}
    assert nginx_packages <= _apt_packages(REPO / "scripts" / "apt" / "edge.txt")


def test_edge_service_builds_that_image() -> None:
    catalog = yaml.safe_load((REPO / "compose" / "edge-nginx.yaml").read_text())
    nginx = catalog["services"]["nginx"]
    assert nginx["build"] == "nginx"  # the folder edge_nginx.render() writes the Dockerfile into
    assert nginx["image"].startswith("homelab/nginx:")
