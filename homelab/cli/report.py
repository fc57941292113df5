"""How results are printed. Secret files are listed by name only; their contents never reach here."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:  # keep `homelab --help` fast: no pydantic at import time
    from homelab.doctor import Check
    from homelab.project import RenderResult


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
    for check in checks:
        typer.echo(f"{check.level:4}  {check.name}: {check.detail}")
    failed = sum(c.level == "fail" for c in checks)
    typer.echo(f"{failed} failed" if failed else "all checks passed")
    return 1 if failed else 0
