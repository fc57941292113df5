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
    from homelab.cli import commands  # noqa: F401 - registers the commands

    app(prog_name="homelab")


def default_config() -> Path:
    return Path(os.environ.get("HOMELAB_CONFIG", "homelab.yaml"))
