"""The one error handler, around every command: exceptions -> one clear line on stderr + the exit code.

- HomelabError: its message (a ConfigError: one `file:line: key: problem` line per problem), its exit code;
- Ctrl-C (SIGINT): `interrupted`, exit 130; SIGTERM: `terminated`, exit 143; no traceback, after every
  step on the way out has undone itself (homelab/signals.py);
- anything else is a bug: one line naming a crash log that holds the traceback, exit 3.

It runs in the outermost group's `invoke` (the `homelab` app, or a sub-app invoked on its own as the tests
do), so each command is just "load, call, print". The exit codes are ExitCode (homelab/errors.py).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from typer.core import TyperCommand, TyperGroup

from homelab import __version__
from homelab.cli.options import JSON_MODE, verbosity_params
from homelab.cli.report import paint
from homelab.errors import ConfigError, ExitCode, HomelabError

if TYPE_CHECKING:
    from typer._click import Context


class HandledGroup(TyperGroup):
    """A command group whose outermost invocation maps every exception to an exit code."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        for command in (self, *_descendants(self)):  # `-v/-q` after the subcommand too: `homelab plan -v`
            known = {name for param in command.params for name in getattr(param, "opts", ())}
            command.params.extend(p for p in verbosity_params() if not known & set(p.opts))

    def invoke(self, ctx: Context) -> Any:
        if ctx.parent is not None:  # an outer group handles it, once
            return super().invoke(ctx)
        from homelab import signals

        if "--json" in (*getattr(ctx, "_protected_args", ()), *ctx.args):  # before parsing: a signal may come first
            ctx.meta[JSON_MODE] = True
        try:
            with signals.raising():  # SIGTERM raises Terminated from here on, as SIGINT raises KeyboardInterrupt
                return super().invoke(ctx)
        except (typer.Exit, typer.Abort, typer.TyperException, BrokenPipeError):
            raise  # exit codes, usage errors (exit 2) and a closed pipe: typer reports them
        except HomelabError as exc:
            raise typer.Exit(_report(ctx, exc.exit_code, _lines(exc))) from None
        except KeyboardInterrupt:
            raise typer.Exit(_report(ctx, ExitCode.INTERRUPTED, ["interrupted"])) from None
        except signals.Terminated:
            raise typer.Exit(_report(ctx, ExitCode.TERMINATED, ["terminated"])) from None
        except Exception as exc:
            raise typer.Exit(_report(ctx, ExitCode.INTERNAL, [_crash_line(exc)])) from None


def _descendants(group: TyperGroup) -> Iterator[TyperCommand | TyperGroup]:
    for command in group.commands.values():
        if isinstance(command, TyperCommand | TyperGroup):
            yield command
        if isinstance(command, TyperGroup):
            yield from _descendants(command)


def _lines(exc: HomelabError) -> list[str]:
    if isinstance(exc, ConfigError):
        return list(exc.problems)  # already `file:line: key: message`
    return [f"error: {exc}"]


def _report(ctx: Context, code: int, lines: list[str]) -> int:
    for line in lines:
        typer.echo(paint(line, "red", err=True), err=True)
    if ctx.meta.get(JSON_MODE):  # --json promises one JSON document on stdout, failures included
        import json

        typer.echo(json.dumps({"ok": False, "exit_code": int(code), "errors": lines}, indent=2))
    return int(code)


def crash_dir() -> Path:
    """Where crash logs go: $XDG_STATE_HOME/homelab (default ~/.local/state/homelab)."""
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "homelab"


def _crash_line(exc: Exception) -> str:
    summary = (str(exc).strip().splitlines() or [""])[0][:200]
    what = f"{type(exc).__name__}: {summary}" if summary else type(exc).__name__
    try:
        where = f"the traceback is in {write_crash_log(exc)}"
    except OSError as failed:  # the log itself could not be written: say so, still in one line
        where = f"no crash log ({failed})"
    return f"internal error ({what}); {where}; please report it"


def write_crash_log(exc: Exception) -> Path:
    """The traceback with the version and arguments, in a new 0600 file (the temp folder as a fallback)."""
    import tempfile  # only when it crashed: `homelab --help` stays fast
    import traceback
    from datetime import UTC, datetime

    now = datetime.now(UTC)
    text = (
        f"homelab {__version__} crashed at {now.isoformat(timespec='seconds')}\n"
        f"argv: {sys.argv!r}\npython: {sys.version.split()[0]}\n\n" + "".join(traceback.format_exception(exc))
    )
    name = f"crash-{now:%Y%m%dT%H%M%SZ}-{os.getpid()}.log"
    try:
        return _write_private(crash_dir() / name, text)
    except OSError:
        return _write_private(Path(tempfile.gettempdir()) / name, text)


def _write_private(path: Path, text: str) -> Path:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    return path
