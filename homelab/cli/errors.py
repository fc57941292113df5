"""The one error handler: HomelabError -> message on stderr + its exit code. Anything else propagates."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import typer

from homelab.errors import HomelabError


@contextlib.contextmanager
def handled() -> Iterator[None]:
    try:
        yield
    except HomelabError as exc:
        typer.echo(f"error: {exc}" if "\n" not in str(exc) else f"error:\n{exc}", err=True)
        raise typer.Exit(exc.exit_code) from None
