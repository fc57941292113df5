"""The thin command layer: each command loads the config, calls the library, prints, returns.

Errors are handled once, by the group class (homelab/cli/errors.py); shared options live in
homelab/cli/options.py. Importing this package must stay cheap (`homelab --help`): command modules import
the library inside their functions.
"""

from __future__ import annotations

import copy
import gc
import os
import sys

import typer
from typer.main import get_command_name

from homelab.cli.app import app as app

__all__ = ["app", "main"]


def main() -> None:
    try:
        _only_the_named_command(sys.argv[1:])(prog_name="homelab")
    finally:
        # On the way out Python runs one more full collection over every object still alive, about 30 ms
        # once the config models are built, only to free them all right after: frozen objects are just
        # freed. atexit handlers (log flushing, temporary folders) still run; what is left in reference
        # cycles is returned to the OS with the process.
        gc.freeze()


def _only_the_named_command(args: list[str]) -> typer.Typer:
    """The app with just the command (or command group) `args` name: typer turns every command's signature
    into click parameters on each run, about 17 ms for all of them, and a run needs one. Help and
    --version before the name, shell completion and unknown names get the whole app (command listings,
    did-you-mean)."""
    name = next((arg for arg in args if not arg.startswith("-")), None)
    if name is None or "_HOMELAB_COMPLETE" in os.environ:  # click's completion request for prog_name homelab
        return app
    if {"-h", "--help", "--version"} & set(args[: args.index(name)]):
        return app
    named = [
        c for c in app.registered_commands if c.callback and (c.name or get_command_name(c.callback.__name__)) == name
    ]
    named_groups = [g for g in app.registered_groups if g.name == name]
    if not named and not named_groups:
        return app
    narrowed = copy.copy(app)
    narrowed.registered_commands, narrowed.registered_groups = named, named_groups
    return narrowed


# The command modules register on `app` when imported; doing it here means every entry point (the
# console script, `python -m homelab`, tests, the docs generator) sees the same command tree.
from homelab.cli import commands, nodes, recover, stack, upgrade  # noqa: E402, F401
from homelab.cli.backup import backup_app  # noqa: E402
from homelab.cli.certs import certs_app  # noqa: E402
from homelab.cli.images import images_app  # noqa: E402
from homelab.cli.monitor import monitor_app  # noqa: E402
from homelab.cli.sso import sso_app  # noqa: E402
from homelab.cli.storage import storage_app  # noqa: E402

app.add_typer(monitor_app, name="monitor")
app.add_typer(storage_app, name="storage")
app.add_typer(backup_app, name="backup")
app.add_typer(images_app, name="images")
app.add_typer(certs_app, name="certs")
app.add_typer(sso_app, name="sso")
