"""How results are printed. Secret files are listed by name only; their contents never reach here.

Colour only on a terminal that says it understands escapes (TERM set and not `dumb`) and never when
NO_COLOR is set (https://no-color.org); --json documents are described in docs/cli.md.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import typer

if TYPE_CHECKING:  # keep `homelab --help` fast: no pydantic at import time
    from homelab.checks import Check
    from homelab.project import RenderResult

LEVEL_COLOURS = {"ok": "green", "warn": "yellow", "fail": "red"}


def colour_enabled(stream: TextIO) -> bool:
    term = os.environ.get("TERM", "")
    return not os.environ.get("NO_COLOR") and term not in ("", "dumb") and stream.isatty()


def paint(text: str, colour: str, *, err: bool = False) -> str:
    """`text` in `colour` when the stream it goes to is a terminal and NO_COLOR is unset."""
    return typer.style(text, fg=colour) if colour_enabled(sys.stderr if err else sys.stdout) else text


def emit_json(document: dict[str, Any]) -> None:
    typer.echo(json.dumps(document, indent=2, sort_keys=True))


def report_json(result: RenderResult, config: Path) -> dict[str, Any]:
    changes = [{"path": c.path, "status": c.status, "secret": c.secret} for c in result.report.changes]
    return {
        "ok": True,
        "config": str(config),
        "out": str(result.out),
        "changes": changes,
        "stacks_affected": result.report.stacks_affected(result.plan),
    }


def print_report(result: RenderResult, *, applied: bool) -> None:
    report = result.report
    verb = {
        "new": "created" if applied else "new",
        "changed": "updated" if applied else "changed",
        "obsolete": "removed" if applied else "obsolete",
    }
    for change in report.changes:
        if change.status != "identical":
            typer.echo(f"  {verb[change.status]:8} {change.path}")
    identical = len(report.by_status("identical"))
    if not report.changed:
        typer.echo(f"no changes: {identical} files identical in {result.out}")
        return
    stacks = report.stacks_affected(result.plan)
    counts = ", ".join(
        f"{len(report.by_status(s))} {verb[s]}" for s in ("new", "changed", "obsolete") if report.by_status(s)
    )
    typer.echo(f"{counts}, {identical} identical in {result.out}")
    typer.echo(f"stacks affected: {', '.join(stacks) if stacks else 'none'}")


def print_checks(checks: list[Check]) -> int:
    """The checks, one a line, then a summary; the exit code: 1 when one failed."""
    for check in checks:
        level = paint(f"{check.level:4}", LEVEL_COLOURS[check.level])
        typer.echo(f"{level}  {check.name}: {check.detail}")
    failed = sum(c.level == "fail" for c in checks)
    typer.echo(f"{failed} failed" if failed else "all checks passed")
    return 1 if failed else 0


def print_table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> None:
    """Columns padded to their widest cell, two spaces apart."""
    table = [header, *rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        typer.echo("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
