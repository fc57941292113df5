"""homelab monitor: the monitoring stack's metric catalog."""

from __future__ import annotations

from pathlib import Path

import typer

from homelab.cli import ConfigOption
from homelab.cli.errors import handled

monitor_app = typer.Typer(
    help="The monitoring stack: metric catalog, whisper disk budget, PNG snapshots of the dashboards.",
    no_args_is_help=True,
    rich_markup_mode=None,
)


@monitor_app.callback()
def _monitor() -> None:
    """The monitoring stack: metric catalog, whisper disk budget, PNG snapshots of the dashboards."""


@monitor_app.command()
def size(config: ConfigOption = Path("homelab.yaml")) -> None:
    """Print how many Graphite series collectd sends and the whisper bytes they take (preallocated)."""
    from homelab.config.loader import load
    from homelab.metrics import catalog_for
    from homelab.plan import build_plan

    with handled():
        catalog = catalog_for(build_plan(load(config)))
    per_series = catalog.whisper_bytes_per_series()
    total = catalog.whisper_bytes()
    typer.echo(f"retentions: {catalog.retentions_text} (interval {catalog.interval}s)")
    for plugin, series in catalog.by_plugin().items():
        typer.echo(f"  {plugin:<10} {len(series):>5} series  {len(series) * per_series / 2**20:>9.1f} MiB")
    typer.echo(f"series: {len(catalog.series)}")
    typer.echo(f"whisper bytes: {total} ({total / 2**20:.1f} MiB, {per_series} bytes per series)")


@monitor_app.command()
def snapshot(
    out: Path = typer.Option(..., "--out", help="Directory for the PNG files (created if missing)."),  # noqa: B008
    graphite_url: str = typer.Option(
        "http://127.0.0.1:8080",
        "--graphite-url",
        envvar="HOMELAB_GRAPHITE_URL",
        help="graphite-web's base URL (its /render API draws the graphs).",
    ),
    since: str = typer.Option("-1h", "--from", help="Start, in Graphite's syntax (-6h, -1d...)."),
    until: str = typer.Option("now", "--until", help="End of the graphs."),
    width: int = typer.Option(800, "--width", min=100, max=4000),
    height: int = typer.Option(300, "--height", min=100, max=4000),
    all_panels: bool = typer.Option(False, "--all", help="Every panel, not just the main ones."),
    config: ConfigOption = Path("homelab.yaml"),
) -> None:
    """Draw PNG graphs of the dashboards' main panels with graphite-web (for docs and reports)."""
    from homelab.config.loader import load
    from homelab.metrics import catalog_for
    from homelab.monitoring_snapshot import snapshot as take_snapshot
    from homelab.plan import build_plan
    from homelab.render.monitoring import dashboards

    with handled():
        boards = dashboards(catalog_for(build_plan(load(config))))
        written = take_snapshot(
            graphite_url,
            boards,
            out,
            from_=since,
            until=until,
            width=width,
            height=height,
            all_panels=all_panels,
        )
    for path in written:
        typer.echo(str(path))
