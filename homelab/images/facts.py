"""What homelab relies on in each pinned image, read from the image's upstream sources.

One YAML file per image in `homelab/images/facts/` (package data). Every fact carries its source
(repository, file, line or commit), so a reader can check it and a version bump knows what to re-read.
`homelab images check` compares these facts with the real image; the docker tests build faithful
stand-ins from them.
"""

from __future__ import annotations

import functools
import re
import shlex
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, field_validator

FACTS_DIR = Path(__file__).parent / "facts"


class _Fact(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Sourced(_Fact):
    value: str
    source: str


class Program(_Fact):
    path: str  # where the image has it (absolute)
    source: str


class EnvVar(_Fact):
    file: bool = False  # the image also reads the value from a file named by <NAME>_FILE / __FILE
    source: str


class Health(_Fact):
    port: int
    path: str  # "" when the probe is not HTTP (pg_isready, redis-cli)
    source: str


_CITATION = re.compile(r"\S+:\d+")  # file:line (or file:first-last): where a start-up operation is written


class StartupOp(_Fact):
    """One thing the image's entrypoint or init scripts do to the filesystem before the app runs, and as whom.
    The faithful stand-ins perform each one themselves (tests/docker/images/faithful/standin `op`), under the
    service's rendered user, capabilities and read-only root, on the real mounted folders."""

    do: Literal["mkdir", "chmod", "chown", "walk-chown", "write", "read"]
    # mkdir -p PATH; chmod MODE PATH; chown OWNER PATH (-R with recursive); walk-chown: `find PATH ! -user
    # UID -exec chown OWNER {} +` (reads every folder under PATH); write: create or append to the file PATH
    # (then chown it to OWNER when given, as rsync --chown does); read: list the folder PATH
    path: str
    owner: str = ""  # uid[:gid], for chown, walk-chown and write
    mode: str = ""  # for chmod, octal
    recursive: bool = False  # chown -R
    who: Literal["start", "drop"] = "start"  # the uid the container starts as, or the one it drops to (drops_to)
    only_as_root: bool = False  # the script does it only when started as uid 0 (`if [ "$(id -u)" = 0 ]`)
    unless: str = ""  # a path whose existence skips it (first start only: initdb unless PG_VERSION...)
    may_fail: bool = False  # the script goes on when it fails (`|| :`, no `set -e`)
    source: str  # upstream file:line at the pinned version

    @field_validator("source")
    @classmethod
    def _cited(cls, value: str) -> str:
        if not _CITATION.search(value):
            raise ValueError(f"a start-up operation needs its upstream file:line, got {value!r}")
        return value


class ImageFacts(_Fact):
    name: str  # the facts file's stem, e.g. `postgres`
    image: str
    upstream: str  # repository@commit (or tag) the facts were read at
    built: bool = False  # built by homelab, never pulled
    user: Sourced  # uid:gid the image's process starts as
    programs: dict[str, Program]
    absent: dict[str, str] = {}  # programs one might expect that the image lacks -> source
    files: dict[str, Sourced] = {}  # paths we call or override
    ports: dict[int, str] = {}
    volumes: dict[str, str] = {}
    env: dict[str, EnvVar] = {}
    health: Health | None = None
    # cap_drop ALL + cap_add exactly these (capability -> the upstream line that needs it); None: not yet
    # worked out, the service keeps Docker's default set (docs/resources.md says which and why)
    capabilities: dict[str, str] | None = None
    drops_to: Sourced | None = None  # uid:gid a root entrypoint switches to (gosu, su, Apache's children)
    # named users the facts rely on (user name -> its uid:gid in /etc/passwd): a user the image's scripts
    # only remap when our uid differs from the one it was built with (rocker's rstudio, plex)
    users: dict[str, Sourced] = {}
    # folders the image ships that its start-up works in -> their uid:gid in the image (`images check` stats them)
    owners: dict[str, Sourced] = {}
    # what the entrypoint and init scripts do to the filesystem before the app runs, in order
    startup: list[StartupOp]  # required: [] says the image runs nothing before the app (with a comment why)

    def provides(self, called: str) -> bool:
        """Is `called` (a bare name or an absolute path) a program or file this image has?"""
        return called in self.programs or called in self.files or any(p.path == called for p in self.programs.values())


@functools.cache
def all_facts() -> dict[str, ImageFacts]:
    """image reference -> its facts."""
    out = {}
    for path in sorted(FACTS_DIR.glob("*.yaml")):
        facts = ImageFacts.model_validate({"name": path.stem, **yaml.safe_load(path.read_text(encoding="utf-8"))})
        out[facts.image] = facts
    return out


# --- which programs a command line calls --------------------------------------------------------------

SHELLS = frozenset({"sh", "/bin/sh", "bash", "/bin/bash"})
# builtins of POSIX sh (dash, busybox ash) and the keywords after which a command follows
_BUILTINS = frozenset(
    [
        "[",
        "test",
        "echo",
        "printf",
        "cd",
        ":",
        "true",
        "false",
        "exit",
        "return",
        "set",
        "export",
        "unset",
        "shift",
        "trap",
        "wait",
        "read",
        "umask",
        "local",
        "eval",
        "kill",
        ".",
        "exec",
        "command",
        "break",
        "continue",
    ]
)
_KEYWORDS = frozenset(["if", "then", "else", "elif", "fi", "do", "done", "while", "until", "!", "{", "}", "esac"])
_PUNCTUATION = ";&|()"  # a token made only of these separates commands (; && || | & ( ) ;;)
# a case arm's pattern (`a|b)` at the start of a line in a case body, or after `in` or `;;`)
_CASE_PATTERN = re.compile(r"(\bin\s+|;;\s*|^\s*)\(?[^\s;()][^()\n]*?\)")
_SUBSTITUTION = re.compile(r"\$\(\s*([A-Za-z0-9_./-]+)")


def _without_case_patterns(lines: list[str]) -> list[str]:
    """The lines with each case arm's pattern removed: its words are no commands."""
    out, depth = [], 0
    for line in lines:
        depth += len(re.findall(r"\bcase\b", line))
        out.append(_CASE_PATTERN.sub(r"\1", line) if depth else line)
        depth -= len(re.findall(r"\besac\b", line))
    return out


def script_programs(script: str) -> set[str]:
    """The programs a POSIX shell script runs: the first word of each simple command (after
    assignments, `exec`, keywords), and of each `$( )`; builtins and the script's functions excluded."""
    text = re.sub(r"\$\(\(.*?\)\)", "0", script.replace("\\\n", " "))  # arithmetic is no command
    lines = [re.sub(r"(^|\s)#.*$", "", line) for line in text.splitlines()]  # comments, line by line
    text = "\n".join(_without_case_patterns(lines))
    lexer = shlex.shlex(" ; ".join(text.splitlines()), posix=True, punctuation_chars=_PUNCTUATION)
    lexer.commenters = ""
    words = list(lexer)
    functions = {words[i] for i in range(len(words) - 1) if words[i + 1] == "()"}
    found: set[str] = set(_SUBSTITUTION.findall(text))
    expect_command, skip_for = True, False
    for word in words:
        if not word.strip(_PUNCTUATION):
            expect_command, skip_for = True, False
        elif skip_for or not expect_command:
            continue
        elif word in ("for", "case"):
            skip_for = True  # `for x in words;` and `case word in` have no command until the separator
        elif word in _KEYWORDS or word == "exec" or re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", word):
            continue
        else:
            if not word.startswith("$") and word not in _BUILTINS and word not in functions:
                found.add(word)
            expect_command = False
    return found - _BUILTINS - functions


def argv_programs(argv: list[str]) -> set[str]:
    """Programs an entrypoint/command argv runs (a shell's `-c` script is read; a shell given a script
    file reports the shell only: the caller reads that file). Flags alone (`--configFile=...`) are
    arguments for the image's own entrypoint: no program."""
    if not argv or argv[0].startswith("-"):
        return set()
    if argv[0] in SHELLS and len(argv) > 2 and argv[1] == "-c":
        return {argv[0]} | script_programs(argv[2])
    return {argv[0]}


def healthcheck_programs(test: list[str]) -> set[str]:
    if test and test[0] == "CMD-SHELL":
        return script_programs(" ".join(test[1:]))
    if test and test[0] == "CMD":
        return {test[1]} if len(test) > 1 else set()
    return set()
