"""The thin command layer: each command loads the config, calls the library, prints, returns."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from homelab import __version__

app = typer.Typer(
    name="homelab",
    help="Turn one homelab.yaml into running, monitored, backed-up Docker Compose stacks.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

ConfigOption = Annotated[
    Path,
    typer.Option("--config", "-c", envvar="HOMELAB_CONFIG", help="Path to homelab.yaml.", show_default=True),
]


def _version(value: bool) -> None:
    if value:
        typer.echo(f"homelab {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    verbose: Annotated[int, typer.Option("--verbose", "-v", count=True, help="More output (-vv: debug).")] = 0,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")
    ] = False,
) -> None:
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)


def main() -> None:
    app(prog_name="homelab")


def default_config() -> Path:
    return Path(os.environ.get("HOMELAB_CONFIG", "homelab.yaml"))


# The command modules register on `app` when imported; doing it here means every entry point (the
# console script, `python -m homelab`, tests, the docs generator) sees the same command tree.
from homelab.cli import commands, stack  # noqa: E402, F401
from homelab.cli.backup import backup_app  # noqa: E402
from homelab.cli.monitor import monitor_app  # noqa: E402
from homelab.cli.storage import storage_app  # noqa: E402

app.add_typer(monitor_app, name="monitor")
app.add_typer(storage_app, name="storage")
app.add_typer(backup_app, name="backup")
