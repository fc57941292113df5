"""homelab monitor: the monitoring stack's metric catalog."""

from __future__ import annotations

from pathlib import Path

import typer

from homelab.cli.errors import HandledGroup
from homelab.cli.options import DEFAULT_CONFIG, ConfigOption

monitor_app = typer.Typer(
    cls=HandledGroup,
    help="The monitoring stack: metric catalog, whisper disk budget, PNG snapshots of the dashboards.",
    no_args_is_help=True,
    rich_markup_mode=None,
)


@monitor_app.callback()
def _monitor() -> None:
    """The monitoring stack: metric catalog, whisper disk budget, PNG snapshots of the dashboards."""


@monitor_app.command()
def size(config: ConfigOption = DEFAULT_CONFIG) -> None:
    """Print how many Graphite series collectd sends and the whisper bytes they take (preallocated)."""
    from homelab.config.loader import load
    from homelab.monitoring.catalog_builder import catalog_for
    from homelab.plan import build_plan

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
    config: ConfigOption = DEFAULT_CONFIG,
) -> None:
    """Draw PNG graphs of the dashboards' main panels with graphite-web (for docs and reports)."""
    from homelab.config.loader import load
    from homelab.monitoring.catalog_builder import catalog_for
    from homelab.monitoring.snapshot import snapshot as take_snapshot
    from homelab.plan import build_plan
    from homelab.render.dashboards import dashboards

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


@monitor_app.command()
def discover(config: ConfigOption = DEFAULT_CONFIG) -> None:
    """Read the BMC's sensors and thresholds (ipmitool, with the configured BMC settings), lm-sensors,
    the disks and their SMART support (smartctl), the network cards and the ZFS pools into the inventory
    file `monitoring.inventory` names; edits of an existing one are kept."""
    from homelab.config.loader import load
    from homelab.monitoring.discover import bmc_reader, discover_into
    from homelab.runtime.hwmon import Host
    from homelab.runtime.smart import Smartctl
    from homelab.runtime.zfs import ZfsCli

    loaded = load(config)
    path, found = discover_into(loaded, bmc_reader(loaded), Host(), smart=Smartctl(), zfs=ZfsCli())
    inventory = found.inventory
    typer.echo(f"{path}: {len(inventory.bmc)} BMC sensors ({len(inventory.collected())} collected), "
               f"{len(inventory.hwmon)} lm-sensors features, {len(inventory.disks)} disks "
               f"({len(inventory.no_smart)} without SMART), {len(inventory.nics)} network cards, "
               f"{len(inventory.pools)} ZFS pools")  # fmt: skip
    for line in found.skipped:
        typer.echo(f"  skipped {line}", err=True)


@monitor_app.command()
def check(config: ConfigOption = DEFAULT_CONFIG) -> None:
    """Compare the inventory with what the BMC and ZFS report now: sensors and pools gone or new. Exit 1
    on drift."""
    from homelab.config.loader import load
    from homelab.monitoring import inventory
    from homelab.monitoring.discover import bmc_reader, inventory_path
    from homelab.monitoring.discover import check as compare
    from homelab.runtime.zfs import ZfsCli

    loaded = load(config)
    reader = bmc_reader(loaded)
    drift = compare(reader, inventory.load(inventory_path(loaded)), ZfsCli()) if reader else None
    if drift is None:
        typer.echo("monitoring.ipmi is off: nothing to compare")
        return
    for name in drift.missing:
        typer.echo(f"gone: {name} (in the inventory, no reading from the BMC now)")
    for name in drift.new:
        typer.echo(f"new: {name} (the BMC reports it; run `homelab monitor discover` to add it)")
    if not drift.clean:
        raise typer.Exit(1)
    typer.echo("the inventory matches the BMC")


@monitor_app.command("test-alert")
def test_alert(config: ConfigOption = DEFAULT_CONFIG) -> None:
    """Send a test notification with exactly the settings Grafana gets: a mail to contact_email through
    monitoring.smtp, a POST to monitoring.webhook. Exit 2 when one cannot be delivered."""
    from homelab.config.loader import load
    from homelab.monitoring.delivery import test_alert as send

    deliveries = send(load(config))
    for delivery in deliveries:
        typer.echo(f"{delivery.channel}: {delivery.detail}")
