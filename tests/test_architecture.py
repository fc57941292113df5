"""docs/architecture.md stays true: every module it names exists, and the rules it states hold."""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
from types import ModuleType

from tests.conftest import REPO

DOC = REPO / "docs" / "architecture.md"
PACKAGE = REPO / "homelab"
# `homelab/plan.py`, `compose/*.yaml`, `tests/contract/`: a path in backticks, as the doc writes them.
NAMED = re.compile(r"`((?:homelab|compose|tests|docs)/[^`\s]*)`")
PROGRAMS = ("zfs", "zpool", "rclone")


def _named_paths() -> list[str]:
    return sorted(set(NAMED.findall(DOC.read_text(encoding="utf-8"))))


def test_every_path_the_doc_names_exists() -> None:
    named = _named_paths()
    assert len(named) >= 30, named  # the pattern still finds the doc's paths
    missing = []
    for path in named:
        if "<" in path:  # a pattern such as homelab/apps/<entry>.py: its folder must exist
            path = path.split("<", 1)[0]
        matches = list(REPO.glob(path)) if "*" in path else [REPO / path] if (REPO / path).exists() else []
        if not matches:
            missing.append(path)
    assert not missing, f"docs/architecture.md names paths that do not exist: {missing}"


def test_shared_names_import_nothing_of_homelab() -> None:
    tree = ast.parse((PACKAGE / "layout.py").read_text(encoding="utf-8"))
    imported = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module]
    imported += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert not [m for m in imported if m.split(".")[0] == "homelab"], imported


def test_outside_programs_are_spelled_only_in_runtime_drivers() -> None:
    """The issue's check, `grep -rn '"zfs"\\|"zpool"\\|"rclone"' homelab/`, finds only homelab/runtime/."""
    literal = re.compile("|".join(f'"{p}"' for p in PROGRAMS))
    found = [
        f"{path.relative_to(REPO)}:{number}: {line.strip()}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if PACKAGE / "runtime" not in path.parents
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if literal.search(line)
    ]
    assert not found, "argv of outside programs outside homelab/runtime/:\n" + "\n".join(found)


def _imports_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("imports", REPO / "scripts" / "checks" / "imports.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["imports"] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


IMPORTS = _imports_module()


def test_the_import_graph_has_no_circle() -> None:
    """Every import counts (top level, in a function, under TYPE_CHECKING): two modules in a circle cannot be
    read, tested or moved apart."""
    edges = IMPORTS.graph()
    assert sum(len(targets) for targets in edges.values()) > 300  # the graph is really read
    assert not IMPORTS.circles(edges), "import circles:\n" + "\n".join(map(str, IMPORTS.circles(edges)))


def test_the_circle_finder_finds_a_circle() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert IMPORTS.circles(edges) == [["a", "b", "c"]]


def test_no_layer_imports_one_below_it() -> None:
    assert not IMPORTS.upward_imports(IMPORTS.graph()), "\n".join(IMPORTS.upward_imports(IMPORTS.graph()))


def test_every_module_has_a_layer() -> None:
    unplaced = [m.rel for m in IMPORTS.modules().values() if IMPORTS.layer_of(m) is None]
    assert not unplaced, f"modules in no layer of scripts/checks/imports.py LAYERS: {unplaced}"


def test_the_docs_layer_table_is_the_checked_one() -> None:
    """docs/architecture.md shows the layers the import test enforces (regenerate with
    `.venv/bin/python scripts/checks/imports.py`)."""
    assert IMPORTS.layer_table() in DOC.read_text(encoding="utf-8")
