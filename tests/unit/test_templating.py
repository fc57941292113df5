"""Compiled templates are cached between runs like Python's .pyc files: reused, recompiled when the
template changes, and never a reason for a render to fail."""

from __future__ import annotations

import sys
from pathlib import Path

import jinja2
import pytest

from homelab.render import templating


def _environment(cache_dir: Path, source: str) -> jinja2.Environment:
    cache = templating._PycacheBytecodeCache()
    cache.directory = str(cache_dir)
    return jinja2.Environment(loader=jinja2.DictLoader({"t.j2": source}), bytecode_cache=cache)  # noqa: S701


def test_the_next_run_uses_the_compiled_template(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    assert _environment(tmp_path / "cache", "a {{ x }}").get_template("t.j2").render(x=1) == "a 1"
    assert len(list((tmp_path / "cache").iterdir())) == 1

    def no_compile(*args: object, **kwargs: object) -> None:
        raise AssertionError("compiled again")

    with monkeypatch.context() as patch:
        patch.setattr(jinja2.Environment, "compile", no_compile)
        assert _environment(tmp_path / "cache", "a {{ x }}").get_template("t.j2").render(x=2) == "a 2"
    # a changed template does not match the cached checksum
    assert _environment(tmp_path / "cache", "b {{ x }}").get_template("t.j2").render(x=3) == "b 3"


def test_a_cache_that_cannot_be_written_costs_only_the_compile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    (tmp_path / "file").write_text("")
    assert _environment(tmp_path / "file" / "cache", "a {{ x }}").get_template("t.j2").render(x=1) == "a 1"
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    assert _environment(tmp_path / "cache", "a {{ x }}").get_template("t.j2").render(x=1) == "a 1"
    assert not (tmp_path / "cache").exists()
