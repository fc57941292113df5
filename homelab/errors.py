"""The one exception root. The CLI maps each kind to an exit code in one place (cli.run_command)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field


class HomelabError(Exception):
    """Anything we expect to go wrong and can explain in one message."""

    exit_code = 1


class ConfigError(HomelabError):
    """Bad input: the config file, a secret file, a flag. Nothing was changed."""

    exit_code = 2

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("\n".join(problems))


class EnvironmentProblem(HomelabError):
    """The machine cannot do what was asked (engine unreachable, compose too old...)."""

    exit_code = 2


class RefusedToOverwrite(HomelabError):
    """A file we did not generate stands where we would write."""

    exit_code = 2


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
        from homelab.runtime.process import redact

        tail = (self.stderr or self.stdout).strip().splitlines()[-5:]
        detail = "\n  ".join(tail)
        text = f"command failed (exit {self.returncode}): {' '.join(self.argv)}"
        if detail:
            text += f"\n  {detail}"
        return redact(text, self.redactions)
