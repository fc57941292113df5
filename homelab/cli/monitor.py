"""homelab monitor: the monitoring stack's metric catalog."""

from __future__ import annotations

from pathlib import Path

import typer

from homelab.cli import ConfigOption
from homelab.cli.errors import handled

monitor_app = typer.Typer(
    help="The monitoring stack: metric catalog and whisper disk budget.", no_args_is_help=True, rich_markup_mode=None
)


@monitor_app.callback()
def _monitor() -> None:
    """The monitoring stack: metric catalog and whisper disk budget."""


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
