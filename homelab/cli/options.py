"""The options shared by the commands, defined once: config (found like git finds .git), --out, --force,
--json, the stacks argument, and -v/-q (accepted before and after the subcommand).

Only typer and the standard library here: `homelab --help` must not import pydantic or yaml.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from typer.main import get_command

if TYPE_CHECKING:
    from typer._click import Context, Parameter

DEFAULT_CONFIG = Path("homelab.yaml")
JSON_MODE = "homelab.json"  # ctx.meta key: the command prints one JSON document on stdout
VERBOSITY = "homelab.verbosity"  # ctx.meta key: -v count minus -q count


def discover_config() -> Path:
    """homelab.yaml in the working folder or the nearest parent folder that has one (as git finds .git),
    relative to the working folder; ./homelab.yaml when there is none (the error then names it). Any
    entry named homelab.yaml stops the search, even one that cannot be read (a symlink loop, a FIFO): the
    load then says what is wrong with it, instead of quietly using a parent folder's config."""
    here = Path.cwd()
    for folder in (here, *here.parents):
        candidate = folder / DEFAULT_CONFIG
        try:
            candidate.lstat()
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError:  # a parent we may not look into: keep going up, as git does
            if folder != here:
                continue
        return Path(os.path.relpath(candidate, here))
    return DEFAULT_CONFIG


# Commands that only read: they never wait for the folder's lock. Every other command with a config
# option writes something (outputs, state, the inventory) and holds the lock while it runs.
READ_ONLY = frozenset(
    {
        "validate", "plan", "status", "doctor", "logs", "nodes", "images", "images check", "monitor",
        "monitor check", "monitor size", "monitor snapshot", "monitor test-alert", "storage", "storage plan",
        "backup", "backup status", "backup schedule", "backup schedule print", "certs", "certs check",
    }
)  # fmt: skip


def command_name(ctx: typer.Context) -> str:
    """`backup run` for `homelab backup run` (the root's own name left out)."""
    names = []
    here: Context | None = ctx
    while here is not None and here.parent is not None:
        names.append(here.info_name or "")
        here = here.parent
    return " ".join(reversed(names))


def _config(ctx: typer.Context, param: typer.CallbackParam, value: Path) -> Path:
    source = ctx.get_parameter_source(param.name or "config")
    if source is not None and source.name == "DEFAULT":  # neither -c nor HOMELAB_CONFIG: look for it
        value = discover_config()
    name = command_name(ctx)
    if name not in READ_ONLY and not ctx.resilient_parsing:
        from homelab.folderlock import holding  # only for writers: `--help` stays fast

        ctx.with_resource(holding(value.absolute().parent, name))
    return value


ConfigOption = Annotated[
    Path,
    typer.Option(
        "--config",
        "-c",
        envvar="HOMELAB_CONFIG",
        callback=_config,
        show_default="homelab.yaml here or in the nearest parent folder",
        help="Path to homelab.yaml.",
    ),
]
NewConfigOption = Annotated[  # `init` writes a new file: no search
    Path, typer.Option("--config", "-c", envvar="HOMELAB_CONFIG", show_default=True, help="Where to write it.")
]
OutOption = Annotated[
    Path | None, typer.Option("--out", "-o", help="Stacks folder (default: ./stacks next to the config).")
]
ForceOption = Annotated[bool, typer.Option("--force", help="Replace files homelab did not write or that were edited.")]
DryRunOption = Annotated[bool, typer.Option("--dry-run", help="Show what would change; change nothing.")]
StacksArgument = Annotated[
    list[str] | None,
    typer.Argument(help="Stacks to act on (edge, media, cloud, dev, monitoring); default: all."),
]


def _json_mode(ctx: typer.Context, value: bool) -> bool:
    if value:
        ctx.meta[JSON_MODE] = True
    return value


JsonOption = Annotated[
    bool,
    typer.Option("--json", callback=_json_mode, help="Print one JSON document on stdout (schema: docs/cli.md)."),
]


def set_verbosity(level: int) -> None:
    """-v: info, -vv: debug, -q: errors only; on stderr."""
    import logging  # not at import time: `homelab --help` does not log

    logging.basicConfig(format="%(levelname)s %(name)s: %(message)s", stream=None)
    logging.getLogger().setLevel(logging.WARNING - 10 * max(-2, min(level, 2)))


def quiet(ctx: typer.Context) -> bool:
    """-q given (more often than -v): commands leave out their step-by-step progress."""
    return int(ctx.meta.get(VERBOSITY, 0)) < 0


def _adjust(ctx: typer.Context, param: typer.CallbackParam, value: int) -> int:
    if value and not ctx.resilient_parsing:
        level = ctx.meta.get(VERBOSITY, 0) + (value if param.name == "verbose" else -value)
        ctx.meta[VERBOSITY] = level
        set_verbosity(level)
    return value


@functools.cache
def verbosity_params() -> tuple[Parameter, ...]:
    """-v/-q as click parameters, added to every command and group by the CLI's group class."""
    flags = typer.Typer(add_completion=False)

    @flags.command()
    def _flags(
        verbose: Annotated[
            int,
            typer.Option(
                "--verbose",
                "-v",
                count=True,
                expose_value=False,
                callback=_adjust,
                show_default=False,
                help="More output (-vv: debug).",
            ),
        ] = 0,
        quiet: Annotated[
            int,
            typer.Option(
                "--quiet",
                "-q",
                count=True,
                expose_value=False,
                callback=_adjust,
                show_default=False,
                help="Less output: only errors are logged; no step-by-step progress.",
            ),
        ] = 0,
    ) -> None:
        """Never run: its parameters are borrowed."""

    return tuple(get_command(flags).params)
