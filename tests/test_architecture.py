"""docs/architecture.md stays true: every module it names exists, and the rules it states hold."""

from __future__ import annotations

import ast
import re
from pathlib import Path

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


PURE = (
    "config", "profiles", "catalog.py", "plan.py", "plan_model.py", "apps", "monitoring", "render",
    "layout.py", "certs/expiry.py", "yamlio.py", "images/budget.py", "files.py",
)  # fmt: skip
PURE_MODULES = {"homelab." + p.removesuffix(".py").replace("/", ".") for p in PURE} | {"homelab.errors"}


def _homelab_imports(path: Path) -> set[str]:
    """Every homelab module `path` imports, at the top or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module == "homelab":
            found |= {f"homelab.{a.name}" for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return {m for m in found if m.split(".")[0] == "homelab"}


def test_load_plan_and_render_import_nothing_below_them() -> None:
    files = [p for name in PURE for p in ([PACKAGE / name] if name.endswith(".py") else (PACKAGE / name).rglob("*.py"))]
    files = [p for p in files if p.name not in ("discover.py", "delivery.py", "snapshot.py")]  # monitoring's verbs
    assert len(files) > 15, files
    wrong = {
        f"{path.relative_to(REPO)} imports {module}"
        for path in files
        for module in _homelab_imports(path)
        if not any(module == pure or module.startswith(pure + ".") for pure in PURE_MODULES)
    }
    assert not wrong, sorted(wrong)


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
