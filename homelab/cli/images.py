"""homelab images check: the pinned images against what homelab relies on in them (their facts)."""

from __future__ import annotations

import typer

from homelab.cli.errors import HandledGroup
from homelab.cli.options import DEFAULT_CONFIG, ConfigOption

images_app = typer.Typer(
    cls=HandledGroup, help="The container images the config uses, checked against their facts.", no_args_is_help=True
)


@images_app.command("check")
def check_cmd(config: ConfigOption = DEFAULT_CONFIG) -> None:
    """Pull each image the config uses (when not present), check its user, programs and files; exit 1 on
    any mismatch or failed pull."""
    from homelab.config.loader import load
    from homelab.images.check import check_images
    from homelab.plan import build_plan
    from homelab.runtime.docker import Docker

    plan = build_plan(load(config))
    docker = Docker()
    docker.check()
    reports = check_images(plan, docker)
    for report in reports:
        typer.echo(f"{report.ref}  ({report.facts.name}: {', '.join(report.services)})")
        if report.error:
            typer.echo(f"  FAIL  {report.error}")
        for finding in report.findings:
            mark = "ok  " if finding.ok else "FAIL"
            typer.echo(f"  {mark}  {finding.what:32} expected {finding.expected:8} found {finding.found}")
    failed = [r.ref for r in reports if not r.ok]
    typer.echo(
        f"{len(failed)} of {len(reports)} images failed: {', '.join(failed)}"
        if failed
        else f"all {len(reports)} images match their facts"
    )
    raise typer.Exit(1 if failed else 0)
