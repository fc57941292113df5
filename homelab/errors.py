"""The one exception root, and the exit code of each kind of error (the table in docs/cli.md).

The CLI maps them to messages and exit codes in one place (homelab/cli/errors.py).
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from enum import IntEnum

from homelab.redact import redact


class ExitCode(IntEnum):
    """What `homelab` exits with; scripts may rely on these (docs/cli.md)."""

    OK = 0
    FAILED = 1  # the command ran and something failed: a check, a command it ran, an unhealthy service
    USAGE = 2  # bad config, bad secret file, bad flag: nothing was changed
    INTERNAL = 3  # a bug in homelab: the traceback is in a crash log
    ENVIRONMENT = 4  # the machine lacks what was asked for: Docker Engine, compose v2, graphite-web...
    REFUSED = 5  # a file homelab did not write (or one edited by hand) stands where it would write
    INTERRUPTED = 130  # Ctrl-C (128 + SIGINT, as shells report it)
    TERMINATED = 143  # SIGTERM (128 + 15): what systemd and Docker send to stop a process


class NodeDown(OSError):
    """A file lives on a Swarm node that is down: it cannot be read, and nothing placed there runs."""


class HomelabError(Exception):
    """Anything we expect to go wrong and can explain in one message."""

    exit_code: int = ExitCode.FAILED


class ConfigError(HomelabError):
    """Bad input: the config file, a secret file, a flag. Nothing was changed."""

    exit_code = ExitCode.USAGE

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("\n".join(problems))


class EnvironmentProblem(HomelabError):
    """The machine cannot do what was asked (engine unreachable, compose too old...)."""

    exit_code = ExitCode.ENVIRONMENT


class RefusedToOverwrite(HomelabError):
    """A file we did not generate stands where we would write."""

    exit_code = ExitCode.REFUSED


class WriteFailed(HomelabError):
    """Writing the output failed (full disk, read-only folder...); what was there before is untouched."""

    exit_code = 1


class Refused(HomelabError):
    """A guard said no to protect something outside the box (a CA's rate limits). Nothing changed;
    the message says when to try again."""

    exit_code = ExitCode.REFUSED


@dataclass
class CommandFailed(HomelabError):
    argv: list[str]
    returncode: int
    stdout: str = ""
    stderr: str = ""
    redactions: list[str] = field(default_factory=list)

    @classmethod
    def from_process(cls, proc: subprocess.CompletedProcess[str], redactions: list[str]) -> CommandFailed:
        return cls(list(proc.args), proc.returncode, proc.stdout or "", proc.stderr or "", redactions)

    def __str__(self) -> str:

        tail = (self.stderr or self.stdout).strip().splitlines()[-5:]
        detail = "\n  ".join(tail)
        text = f"command failed (exit {self.returncode}): {' '.join(self.argv)}"
        if detail:
            text += f"\n  {detail}"
        return redact(text, self.redactions)
