"""The package's import graph: who imports whom, its circles, and the layer each module belongs to.

    .venv/bin/python scripts/checks/imports.py            prints the layers (docs/architecture.md's table)

Every import counts, at the top, inside a function or under TYPE_CHECKING: a circle of type-only imports
is still two modules that cannot be understood apart. `tests/test_architecture.py` fails on any circle and
on any import from a layer into one below it.
"""

from __future__ import annotations

import ast
import functools
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "homelab"

# Top to bottom: a module may import its own layer and the layers above it, never one below.
# A module belongs to the layer of the longest prefix that names it (a folder, or a module path).
LAYERS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("shared", "names, errors and safe file reading every layer may use; they import nothing below", (
        "homelab/__init__.py", "homelab/layout.py", "homelab/yamlio.py", "homelab/errors.py", "homelab/redact.py",
        "homelab/checks.py", "homelab/files.py", "homelab/signals.py",
    )),
    ("load", "homelab.yaml -> Config, the app catalog, hardware profiles", (
        "homelab/config/", "homelab/profiles/", "homelab/catalog.py",
    )),
    ("plan", "Config -> Plan (pure data): its records, the apps' hooks, the image facts, the metric catalog", (
        "homelab/plan.py", "homelab/plan_model.py", "homelab/sso_routes.py", "homelab/apps/",
        "homelab/images/budget.py", "homelab/images/facts.py", "homelab/certs/policy.py", "homelab/certs/expiry.py",
        "homelab/monitoring/",
    )),
    ("render", "Plan -> {path: bytes}", ("homelab/render/",)),
    ("writer", "diff against disk, write atomically, generate secrets, one writer per config folder", (
        "homelab/writer.py", "homelab/ownership.py", "homelab/secrets.py", "homelab/folderlock.py",
        "homelab/sso_passwd.py",
    )),
    ("runtime", "one driver per outside program", ("homelab/runtime/",)),
    ("verbs", "act on the machine through the drivers: the engines, certificates, backups, upgrades, storage", (
        "homelab/engine/", "homelab/certs/", "homelab/backup/", "homelab/upgrade/", "homelab/storage.py",
        "homelab/doctor.py", "homelab/images/", "homelab/memory.py", "homelab/monitoring/discover.py",
        "homelab/monitoring/delivery.py", "homelab/monitoring/snapshot.py", "homelab/local.py", "homelab/init.py",
    )),
    ("session", "whole commands as library calls: `up` (Plan once, render, converge, apply, wait), recover", (
        "homelab/project.py", "homelab/up.py", "homelab/certs/switch.py", "homelab/backup/recover.py",
        "homelab/backup/recovery_drill.py",
    )),
    ("cli", "Typer commands: parse, call the library, print", (
        "homelab/cli/", "homelab/__main__.py", "homelab/entry.py", "homelab/reference.py",
    )),
    ("plugins", "collectd python plugins, copied into the collectd image: they import nothing of homelab", (
        "homelab/collectd_plugins/",
    )),
)  # fmt: skip


@dataclass(frozen=True)
class Module:
    name: str  # homelab.render.compose
    path: Path

    @property
    def rel(self) -> str:
        return self.path.relative_to(REPO).as_posix()


@functools.cache
def _tree(path: Path) -> ast.Module:
    """A module's syntax tree, parsed once for the imports it names and the names it takes from a package."""
    return ast.parse(path.read_text(encoding="utf-8"))


def modules() -> dict[str, Module]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(REPO).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = Module(name, path)
    return found


def _imported_names(module: Module) -> Iterator[str]:
    package = module.name if module.path.name == "__init__.py" else module.name.rpartition(".")[0]
    for node in ast.walk(_tree(module.path)):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            # `from homelab.render import compose` imports the submodule; `import Plan` names the module
            yield from (f"{base}.{alias.name}" for alias in node.names)
            yield base


def graph() -> dict[str, set[str]]:
    """module -> the homelab modules it imports (a submodule, or the module a name comes from)."""
    known = modules()
    edges: dict[str, set[str]] = {name: set() for name in known}
    for name, module in known.items():
        for imported in _imported_names(module):
            target = imported
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name and target.split(".")[0] == "homelab":
                edges[name].add(target)
    # `from homelab.render import compose` yields both homelab.render.compose and homelab.render: keep the
    # package only when a name really comes from its __init__ (it is not one of its submodules)
    for name, module in known.items():
        named_submodules = {t for t in edges[name] if t.rpartition(".")[0] in edges[name]}
        for package in {t.rpartition(".")[0] for t in named_submodules}:
            if not _takes_names_from(module, package, known):
                edges[name].discard(package)
    # importing a submodule runs its packages' __init__ first: a package whose __init__ imports homelab modules
    # is imported too (not the importer's own packages, which are running already)
    importing_packages = {p for p in known if known[p].path.name == "__init__.py" and edges[p]}
    for name in known:
        for target in list(edges[name]):
            package = target.rpartition(".")[0]
            while package.count("."):
                if package in importing_packages and not name.startswith(package + "."):
                    edges[name].add(package)
                package = package.rpartition(".")[0]
    return edges


def _takes_names_from(module: Module, package: str, known: dict[str, Module]) -> bool:
    for node in ast.walk(_tree(module.path)):
        if (
            isinstance(node, ast.ImportFrom)
            and node.module == package
            and not node.level
            and any(f"{package}.{alias.name}" not in known for alias in node.names)
        ):
            return True
    return False


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(edges[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(edges)))
    for node in sorted(edges):
        if node not in index:
            visit(node)
    return sorted(found)


def layer_of(module: Module) -> int | None:
    best: tuple[int, int] | None = None  # (prefix length, layer)
    for number, (_, _, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if module.rel.startswith(prefix) and (best is None or len(prefix) > best[0]):
                best = (len(prefix), number)
    return None if best is None else best[1]


def upward_imports(edges: dict[str, set[str]]) -> list[str]:
    """Each import from a module into a layer below its own, as `importer (layer) -> imported (layer)`."""
    known = modules()
    wrong = []
    for name, targets in sorted(edges.items()):
        own = layer_of(known[name])
        for target in sorted(targets):
            theirs = layer_of(known[target])
            if own is not None and theirs is not None and theirs > own:
                wrong.append(f"{name} ({LAYERS[own][0]}) -> {target} ({LAYERS[theirs][0]})")
    return wrong


def layer_table() -> str:
    """docs/architecture.md's table of layers, generated from LAYERS."""
    rows = ["| Layer | What it does | Modules |", "| --- | --- | --- |"]
    for name, what, prefixes in LAYERS:
        rows.append(f"| {name} | {what} | {', '.join(f'`{p}`' for p in prefixes)} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(layer_table())
