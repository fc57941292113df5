"""The one subprocess seam: argv lists only, secrets redacted from logs and errors.

`run` captures output; `stream` hands the terminal to the program (`logs -f`).
"""

from __future__ import annotations

import logging
import os
import shlex
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence

from homelab.errors import CommandFailed
from homelab.redact import redact

log = logging.getLogger("homelab.process")


def run(
    argv: Sequence[str],
    *,
    check: bool = True,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    input: str | None = None,
    timeout: float | None = None,
    redactions: Sequence[str] = (),
) -> subprocess.CompletedProcess[str]:
    """Run a program and capture its output; raise CommandFailed (output carried) when check is set."""
    argv = [str(a) for a in argv]
    log.debug("run: %s", redact(shlex.join(argv), redactions))
    full_env = {**os.environ, **env} if env is not None else None
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, env=full_env, cwd=cwd, input=input, timeout=timeout, check=False
        )
    except FileNotFoundError as exc:
        proc = subprocess.CompletedProcess(argv, 127, "", f"{argv[0]}: not found ({exc.strerror})")
    if check and proc.returncode != 0:
        raise CommandFailed.from_process(proc, list(redactions))
    return proc


def stream(argv: Sequence[str], *, redactions: Sequence[str] = ()) -> int:
    """Run a program with its output going straight to this process's stdout/stderr (a follow cannot be
    captured); its exit code, 130 on Ctrl-C, 127 when the program is missing."""
    argv = [str(a) for a in argv]
    log.debug("run: %s", redact(shlex.join(argv), redactions))
    try:
        return subprocess.run(argv, check=False, stdout=sys.stdout, stderr=sys.stderr).returncode
    except FileNotFoundError:
        return 127
    except KeyboardInterrupt:
        return 130


def supervised(
    argv: Sequence[str],
    *,
    watchdog: Callable[[], str | None],
    poll: float = 0.5,
    redactions: Sequence[str] = (),
) -> tuple[subprocess.CompletedProcess[str], str | None]:
    """Run a program and capture its output, asking `watchdog` every `poll` seconds whether to stop it (a
    stalled transfer); the completed process and the watchdog's reason when it was stopped."""
    argv = [str(a) for a in argv]
    log.debug("run: %s", redact(shlex.join(argv), redactions))
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    except FileNotFoundError as exc:
        return subprocess.CompletedProcess(argv, 127, "", f"{argv[0]}: not found ({exc.strerror})"), None
    reason = None
    with proc:
        while True:
            try:
                out, err = proc.communicate(timeout=poll)
                break
            except subprocess.TimeoutExpired:
                reason = watchdog()
                if reason:
                    proc.kill()
                    out, err = proc.communicate()
                    break
    return subprocess.CompletedProcess(argv, proc.returncode, out, err), reason
