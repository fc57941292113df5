"""Structure limits of the package (design.md): functions <= 60 lines, radon complexity <= C, modules <= 400 lines.

    .venv/bin/python scripts/checks/structure.py [PATH...]      (default: homelab/)

Exits 1 listing every offender as `path:line: what`. Known offenders waiting for their split are listed in
scripts/checks/structure-allow.txt (one `KIND TARGET` per line); an entry that no longer offends is reported
so the list only shrinks.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from radon.complexity import cc_rank, cc_visit
from radon.visitors import Function

REPO = Path(__file__).resolve().parents[2]
ALLOW = Path(__file__).with_name("structure-allow.txt")
MAX_FUNCTION_LINES = 60
MAX_MODULE_LINES = 400
WORST_GRADE = "C"


@dataclass(frozen=True)
class Offence:
    kind: str  # module-lines | function-lines | complexity
    target: str  # path, or path::qualified.name
    line: int
    detail: str

    @property
    def key(self) -> str:
        return f"{self.kind} {self.target}"


def _functions(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield f"{prefix}{node.name}", node
            yield from _functions(node, f"{prefix}{node.name}.")
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node, f"{prefix}{node.name}.")
        else:
            yield from _functions(node, prefix)


def offences(path: Path) -> Iterator[Offence]:
    text = path.read_text(encoding="utf-8")
    rel = path.resolve().relative_to(REPO).as_posix()
    lines = len(text.splitlines())
    if lines > MAX_MODULE_LINES:
        yield Offence("module-lines", rel, 1, f"module has {lines} lines (max {MAX_MODULE_LINES})")
    for name, node in _functions(ast.parse(text, filename=rel)):
        length = (node.end_lineno or node.lineno) - node.lineno + 1
        if length > MAX_FUNCTION_LINES:
            yield Offence("function-lines", f"{rel}::{name}", node.lineno, f"{name} has {length} lines")
    for name, lineno, complexity in _complexities(cc_visit(text)):
        grade = cc_rank(complexity)
        if grade > WORST_GRADE:
            yield Offence(
                "complexity",
                f"{rel}::{name}",
                lineno,
                f"{name} has complexity {complexity} (grade {grade}, worst allowed {WORST_GRADE})",
            )


def _complexities(blocks: list[Any], prefix: str = "") -> Iterator[tuple[str, int, int]]:
    """Every function, method and nested function (radon lists methods as `Class.method`; a class's own
    figure is a summary of its methods, not code of its own, so it is skipped)."""
    for block in blocks:
        if isinstance(block, Function):
            name = f"{prefix}{block.fullname}"
            yield name, block.lineno, block.complexity
            yield from _complexities(block.closures, f"{name}.")


def allowed() -> set[str]:
    if not ALLOW.exists():
        return set()
    entries = (line.split("#", 1)[0].strip() for line in ALLOW.read_text(encoding="utf-8").splitlines())
    return {" ".join(entry.split()) for entry in entries if entry}


def main(argv: list[str]) -> int:
    roots = [Path(a) for a in argv] or [REPO / "homelab"]
    files = sorted(p for root in roots for p in ([root] if root.is_file() else root.rglob("*.py")))
    allow = allowed()
    found = [o for path in files for o in offences(path)]
    failures = [o for o in found if o.key not in allow]
    for offence in failures:
        target = offence.target.split("::", 1)[0]
        print(f"{target}:{offence.line}: {offence.detail}  [{offence.key}]")
    stale = allow - {o.key for o in found}
    if not argv:  # only a whole-package run can tell that an entry is stale
        for key in sorted(stale):
            print(f"note: allow-list entry no longer needed, remove it: {key}", file=sys.stderr)
    if failures:
        print(
            f"{len(failures)} structure problems (limits: functions {MAX_FUNCTION_LINES} lines, "
            f"complexity {WORST_GRADE}, modules {MAX_MODULE_LINES} lines)"
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
