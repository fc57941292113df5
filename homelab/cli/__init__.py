"""The thin command layer: each command loads the config, calls the library, prints, returns.

Errors are handled once, by the group class (homelab/cli/errors.py); shared options live in
homelab/cli/options.py. Importing this package must stay cheap (`homelab --help`): command modules import
the library inside their functions.
"""

from __future__ import annotations

from typing import Annotated

import typer

from homelab import __version__
from homelab.cli.errors import HandledGroup
from homelab.cli.options import VERBOSITY, set_verbosity

__all__ = ["app", "main"]

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


def main() -> None:
    app(prog_name="homelab")


# The command modules register on `app` when imported; doing it here means every entry point (the
# console script, `python -m homelab`, tests, the docs generator) sees the same command tree.
from homelab.cli import commands, nodes, stack, upgrade  # noqa: E402, F401
from homelab.cli.backup import backup_app  # noqa: E402
from homelab.cli.certs import certs_app  # noqa: E402
from homelab.cli.images import images_app  # noqa: E402
from homelab.cli.monitor import monitor_app  # noqa: E402
from homelab.cli.storage import storage_app  # noqa: E402

app.add_typer(monitor_app, name="monitor")
app.add_typer(storage_app, name="storage")
app.add_typer(backup_app, name="backup")
app.add_typer(images_app, name="images")
app.add_typer(certs_app, name="certs")
