"""sso: the single sign-on portal's users (docs/sso.md)."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from homelab.cli.errors import HandledGroup
from homelab.cli.options import DEFAULT_CONFIG, ConfigOption

sso_app = typer.Typer(
    cls=HandledGroup, help="Single sign-on: set a user's password.", no_args_is_help=True, rich_markup_mode=None
)


@sso_app.command()
def passwd(
    user: Annotated[str, typer.Argument(help="A login listed under sso.users.")],
    config: ConfigOption = DEFAULT_CONFIG,
    stdin: Annotated[bool, typer.Option("--stdin", help="Read the password from standard input's first line.")] = False,
) -> None:
    """Hash a new password (bcrypt) into the user's sso.users.USER.password_file, mode 0600. The password is
    asked twice without echo (or read from standard input); neither it nor the hash is printed."""
    from homelab.sso_passwd import password_file, write_hash

    path = password_file(config, user)
    if stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        password = typer.prompt("New password", hide_input=True, confirmation_prompt=True)
    write_hash(path, password)
    typer.echo(f"wrote {user}'s password hash to {path} (run `homelab up` to hand it to the portal)")
