"""The Typer app every command module registers on, and its global options; imports no command module."""

from __future__ import annotations

from typing import Annotated

import typer

from homelab import __version__
from homelab.cli.errors import HandledGroup
from homelab.cli.options import VERBOSITY, set_verbosity

app = typer.Typer(
    name="homelab",
    help="Turn one homelab.yaml into running, monitored, backed-up Docker Compose stacks.",
    cls=HandledGroup,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"homelab {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    ctx: typer.Context,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")
    ] = False,
) -> None:
    set_verbosity(ctx.meta.get(VERBOSITY, 0))
