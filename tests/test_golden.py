"""The rendering of examples/homelab.yaml is committed under stacks/ (and the Grafana files under
grafana/) so a reader sees exactly what the tool generates. `pytest --update-golden` rewrites them."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from homelab.config.loader import load
from homelab.project import render_project
from tests.conftest import REPO

GOLDEN_STACKS = REPO / "stacks"
GOLDEN_GRAFANA = REPO / "grafana"
GRAFANA_PREFIX = "monitoring/grafana/"


def _expected_tree(files: dict[str, bytes]) -> dict[Path, bytes]:
    tree = {GOLDEN_STACKS / rel: content for rel, content in files.items()}
    tree.update(
        {
            GOLDEN_GRAFANA / rel.removeprefix(GRAFANA_PREFIX): c
            for rel, c in files.items()
            if rel.startswith(GRAFANA_PREFIX)
        }
    )
    return tree


def _committed_tree() -> dict[Path, bytes]:
    return {
        p: p.read_bytes()
        for root in (GOLDEN_STACKS, GOLDEN_GRAFANA)
        if root.exists()
        for p in root.rglob("*")
        if p.is_file() and "secrets" not in p.relative_to(root).parts and p.name != ".homelab-manifest.json"
    }


def test_example_rendering_matches_golden_files(
    example_config: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    result = render_project(load(example_config), tmp_path / "stacks", dry_run=True)
    expected = _expected_tree(result.rendering.files)
    if request.config.getoption("--update-golden"):
        for root in (GOLDEN_STACKS, GOLDEN_GRAFANA):
            shutil.rmtree(root, ignore_errors=True)
        for path, content in expected.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)
    committed = _committed_tree()
    stale = sorted(
        str(p.relative_to(REPO)) for p in expected.keys() | committed.keys() if expected.get(p) != committed.get(p)
    )
    assert not stale, f"golden files out of date (run pytest --update-golden): {stale}"


def test_golden_files_hold_no_secret(example_dir: Path) -> None:
    for path, content in _committed_tree().items():
        for name in ("ddns-password", "b2-account", "b2-key"):
            assert f"example-{name}-value".encode() not in content, path
