"""scripts/checks/structure.py finds long functions, complex ones (methods and nested functions too) and long
modules, and honours its allow-list."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO


@pytest.fixture
def structure(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    spec = importlib.util.spec_from_file_location("structure_check", REPO / "scripts" / "checks" / "structure.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["structure_check"] = module
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "REPO", tmp_path)
    monkeypatch.setattr(module, "ALLOW", tmp_path / "allow.txt")
    yield module
    del sys.modules["structure_check"]


def _branches(n: int, indent: str) -> str:
    return "".join(f"{indent}if x == {i}:\n{indent}    return {i}\n" for i in range(n))


def test_each_kind_of_offence(structure, tmp_path: Path) -> None:
    source = (
        "def long():\n" + "    x = 1\n" * 60 + "\n"
        "class C:\n    def method(self, x):\n" + _branches(21, "        ") + "\n"
        "def outer():\n    def inner(x):\n" + _branches(21, "        ") + "    return inner\n"
    )
    source += "\n" * (401 - len(source.splitlines()))
    path = tmp_path / "mod.py"
    path.write_text(source)
    found = {o.key for o in structure.offences(path)}
    assert found == {
        "module-lines mod.py",
        "function-lines mod.py::long",
        "complexity mod.py::C.method",
        "complexity mod.py::outer.inner",
    }


def test_limits_are_inclusive(structure, tmp_path: Path) -> None:
    function = "def f(x):\n" + _branches(19, "    ") + "    y = 1\n" * 20 + "    return -1\n"
    assert len(function.splitlines()) == 60  # and complexity 20: the worst of grade C
    path = tmp_path / "ok.py"
    path.write_text(function + "\n" * (400 - 60))
    assert len(path.read_text().splitlines()) == 400
    assert list(structure.offences(path)) == []


def test_the_allow_list_excuses_only_what_it_names(structure, tmp_path: Path, capsys) -> None:
    (tmp_path / "mod.py").write_text("def long():\n" + "    x = 1\n" * 60)
    (tmp_path / "allow.txt").write_text("# comment\nfunction-lines mod.py::long  # being split\n")
    assert structure.main([str(tmp_path / "mod.py")]) == 0
    (tmp_path / "allow.txt").write_text("function-lines mod.py::other\n")
    assert structure.main([str(tmp_path / "mod.py")]) == 1
    assert "mod.py:1: long has 61 lines" in capsys.readouterr().out
