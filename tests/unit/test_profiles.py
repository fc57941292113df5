"""A run reads the hardware profile and each catalog entry once, however many parts of the render use
them (a profile parsed twice was one of the start-up costs of issue 13)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from homelab import catalog, profiles
from homelab.config.loader import load
from homelab.project import render_project


def test_a_render_reads_each_yaml_file_it_needs_once(
    example_config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: Counter[str] = Counter()

    def counting(module: Any) -> None:
        real = module.safe_load

        def safe_load(text: str) -> Any:
            reads[module.__name__] += 1
            return real(text)

        monkeypatch.setattr(module, "safe_load", safe_load)

    counting(profiles)
    counting(catalog)
    profiles.load_profile.cache_clear()
    catalog.entry.cache_clear()
    loaded = load(example_config)
    render_project(loaded, tmp_path / "out", dry_run=True)
    render_project(loaded, tmp_path / "out", dry_run=True)
    assert reads["homelab.profiles"] == 1
    assert reads["homelab.catalog"] == catalog.entry.cache_info().currsize > 0
