"""ipmitool: the BMC's sensor listings, from the local BMC (/dev/ipmi0) or over LAN (RMCP+).

The password never goes on the command line (other users see argv): `-E` makes ipmitool read it
from IPMI_PASSWORD in its environment."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from homelab.errors import EnvironmentProblem
from homelab.redact import redact
from homelab.runtime import process


class BmcReader(Protocol):
    def sdr(self) -> str:
        """`ipmitool sdr elist full`: names, sensor numbers, entity ids, readings."""

    def sensors(self) -> str:
        """`ipmitool sensor`: readings, units, the six thresholds."""


@dataclass(frozen=True)
class Ipmitool:
    """The real ipmitool. `address` None: the local BMC."""

    address: str | None = None
    username: str | None = None
    password: str | None = None
    port: int = 623
    cipher_suite: int | None = None
    program: str = "ipmitool"
    timeout: float = 120

    def _argv(self, *command: str) -> list[str]:
        argv = [self.program]
        if self.address:
            argv += ["-I", "lanplus", "-H", self.address, "-p", str(self.port), "-U", self.username or "", "-E"]
            if self.cipher_suite is not None:
                argv += ["-C", str(self.cipher_suite)]
        return [*argv, *command]

    def _run(self, *command: str) -> str:
        env = {"IPMI_PASSWORD": self.password or ""} if self.address else None
        done = process.run(
            self._argv(*command), check=False, env=env, timeout=self.timeout, redactions=[self.password or ""]
        )
        where = f"the BMC at {self.address}" if self.address else "the local BMC (/dev/ipmi0)"
        if done.returncode != 0 and not done.stdout.strip():
            detail = redact((done.stderr or "").strip().splitlines()[-1:][0] if done.stderr.strip() else "",
                                    [self.password or ""])  # fmt: skip
            raise EnvironmentProblem(f"ipmitool {' '.join(command)} failed on {where}: {detail or 'no output'}")
        return done.stdout

    def sdr(self) -> str:
        return self._run("sdr", "elist", "full")

    def sensors(self) -> str:
        return self._run("sensor")
