"""The one error handler: HomelabError -> message on stderr + its exit code. Anything else propagates."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import typer

from homelab.errors import ConfigError, HomelabError


@contextlib.contextmanager
def handled() -> Iterator[None]:
    try:
        yield
    except ConfigError as exc:
        for problem in exc.problems:  # already `file:line: key: message`
            typer.echo(problem, err=True)
        raise typer.Exit(exc.exit_code) from None
    except HomelabError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(exc.exit_code) from None
