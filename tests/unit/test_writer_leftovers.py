"""What a killed render (kill -9, power loss: no handler runs) leaves staged next to its targets is removed
by the next write into that folder, each named in a warning (issue 32)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from homelab.config.loader import load
from homelab.project import render_project


def test_the_next_render_removes_and_names_the_leftovers_of_a_killed_one(
    example_config: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    out = tmp_path / "stacks"
    loaded = load(example_config)
    render_project(loaded, out)
    stray = [out / "edge" / ".compose.yaml.homelab-new", out / "secrets" / ".x.homelab-old", out / ".a.homelab-new"]
    for path in stray:
        path.write_text("half\n")
    (example_config.parent / "homelab.yaml").write_text(
        example_config.read_text() + "images:\n  gitea: gitea/gitea:1.22.0\n"
    )
    with caplog.at_level(logging.WARNING, logger="homelab.writer"):
        render_project(load(example_config), out)
    assert [p for p in stray if p.exists()] == []
    assert sorted(r.getMessage() for r in caplog.records) == sorted(
        f"removed {p}, left by an interrupted homelab run" for p in stray
    )


def test_a_render_with_nothing_to_change_leaves_no_stray_either(example_config: Path, tmp_path: Path) -> None:
    out = tmp_path / "stacks"
    render_project(load(example_config), out)
    (out / "dev" / ".compose.yaml.homelab-new").write_text("half\n")
    render_project(load(example_config), out)
    assert not (out / "dev" / ".compose.yaml.homelab-new").exists()
