"""Shell completion for bash, zsh and fish: the protocol each shell's script speaks, and a real bash in a
terminal (tmux) that completes `homelab st<Tab><Tab>` after `homelab --install-completion`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import VENV_BIN

HOMELAB = [sys.executable, "-m", "homelab"]


def _complete(shell: str, words: str, **env: str) -> list[str]:
    full = {**os.environ, "_HOMELAB_COMPLETE": f"complete_{shell}", **env}
    if shell == "bash":
        full |= {"COMP_WORDS": words, "COMP_CWORD": str(len(words.split(" ")) - 1)}
    else:
        full |= {"_TYPER_COMPLETE_ARGS": words, "_TYPER_COMPLETE_FISH_ACTION": "get-args"}
    # as the shells call it: the program name is `homelab`
    proc = subprocess.run([*HOMELAB], capture_output=True, text=True, env=full, check=True, timeout=60, executable=None)
    return proc.stdout.splitlines()


def test_bash_protocol_proposes_subcommands() -> None:
    assert _complete("bash", "homelab st") == ["status", "storage"]
    assert {"backup", "validate", "plan", "up"} <= set(_complete("bash", "homelab "))
    assert {"run", "restore", "status", "schedule"} <= set(_complete("bash", "homelab backup "))


def test_bash_protocol_proposes_options_after_the_subcommand() -> None:
    assert {"--json", "--config", "--verbose", "--quiet", "--help"} <= set(_complete("bash", "homelab validate --"))


def test_zsh_protocol_proposes_subcommands() -> None:
    out = "\n".join(_complete("zsh", "homelab st"))
    assert '"status":' in out and '"storage":' in out and '"validate":' not in out


def test_fish_protocol_proposes_subcommands() -> None:
    names = [line.split("\t")[0] for line in _complete("fish", "homelab st")]
    assert names == ["status", "storage"]


def _wait_for(screen: Callable[[], str], expected: Callable[[str], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not expected(text := screen()):  # a condition with a generous deadline, not a fixed sleep
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}; the terminal shows:\n{text}")
        time.sleep(0.1)


@pytest.mark.real
def test_bash_completion_in_a_terminal(tmp_path: Path, require_program) -> None:
    tmux = require_program("tmux")
    bash = require_program("bash")
    home = tmp_path / "home"
    socket = tmp_path / "tmux.sock"
    env = {
        "HOME": str(home),
        "PATH": f"{VENV_BIN}:/usr/local/bin:/usr/bin:/bin",
        "TERM": "xterm",
        "LANG": os.environ.get("LANG", "C.UTF-8"),
    }
    assert shutil.which("homelab", path=env["PATH"]), "the homelab console script is not in the venv"
    base = [tmux, "-S", str(socket), "-f", "/dev/null"]

    def pane() -> str:
        return subprocess.run([*base, "capture-pane", "-p", "-t", "t"], capture_output=True, text=True).stdout

    def keys(*keys: str) -> None:
        subprocess.run([*base, "send-keys", "-t", "t", *keys], check=True)

    subprocess.run([*base, "new-session", "-d", "-s", "t", "-x", "150", "-y", "40", bash], check=True, env=env)
    try:
        keys("homelab --install-completion", "Enter")
        _wait_for(pane, lambda s: "completion installed in" in s, "--install-completion")
        assert (home / ".bashrc").is_file()
        keys("clear; exec bash", "Enter")  # a new interactive shell reads ~/.bashrc, as a new terminal would
        keys("echo READY", "Enter")
        _wait_for(pane, lambda s: s.count("READY") >= 2, "the new shell")
        keys("homelab st", "Tab", "Tab")
        _wait_for(pane, lambda s: "status" in s and "storage" in s, "bash to list status and storage")
        keys("C-u", "homelab val", "Tab")
        _wait_for(pane, lambda s: "homelab validate" in s, "bash to complete `homelab val` to validate")
    finally:
        subprocess.run([*base, "kill-server"], capture_output=True)
