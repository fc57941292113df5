"""Read-only commands stay read-only (issue 32): on a fresh folder (the example config and its secret
files, nothing rendered yet) `validate`, `plan`, `status`, `backup status` and `doctor` create, change and
remove nothing, at any verbosity and with --json; and no escape codes reach a non-terminal, NO_COLOR or
TERM=dumb."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from homelab.cli import app
from homelab.engine import compose as apply
from homelab.runtime import docker as docker_module
from tests.fakes.docker import FakeDocker
from tests.fakes.zfs import FakeZfs

COMMANDS = [
    ["validate"],
    ["plan"],
    ["plan", "--json"],
    ["status"],
    ["status", "--json"],
    ["backup", "status"],
    ["backup", "status", "--json"],
    ["doctor"],
    ["doctor", "--json"],
]


def _tree(root: Path) -> dict[str, tuple[int, bytes | None]]:
    """Every path under root with its mode and content: what `byte-identical` means here."""
    return {
        str(p.relative_to(root)): (p.lstat().st_mode, p.read_bytes() if p.is_file() and not p.is_symlink() else None)
        for p in sorted(root.rglob("*"))
    }


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_a_read_only_command_leaves_a_fresh_folder_byte_identical(
    tmp_path: Path, example_config: Path, monkeypatch: pytest.MonkeyPatch, command: list[str]
) -> None:
    monkeypatch.setattr(docker_module, "Docker", FakeDocker)
    monkeypatch.setattr(apply, "ZfsCli", FakeZfs)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.chdir(example_config.parent)
    text = example_config.read_text()  # the backup state folder defaults to one under the mountpoint
    example_config.write_text(text.replace("mountpoint: /tank/homelab", f"mountpoint: {tmp_path / 'tank'}"))
    before = _tree(tmp_path)
    result = CliRunner().invoke(app, [*command, "-vv"])
    assert result.exit_code in (0, 1, 4), result.output  # a fresh box: nothing deployed, no backup run yet
    assert "Traceback" not in result.output and "please report it" not in result.output  # no crash
    assert _tree(tmp_path) == before


def _colour_run(env: dict[str, str], *, terminal: bool) -> bytes:
    """`homelab validate` on a broken config (its error line is painted red on a terminal)."""
    argv = [sys.executable, "-m", "homelab", "validate", "-c", "missing.yaml"]
    full_env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "TERM")} | env
    if not terminal:
        return subprocess.run(argv, capture_output=True, env=full_env, check=False, timeout=60).stderr
    leader, follower = pty.openpty()
    with subprocess.Popen(argv, stdout=follower, stderr=follower, env=full_env) as proc:
        os.close(follower)
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
        proc.wait(timeout=60)
    os.close(leader)
    return b"".join(chunks)


@pytest.mark.parametrize(
    ("env", "terminal", "coloured"),
    [
        ({"TERM": "xterm-256color"}, True, True),  # the control case: colour is possible here
        ({"TERM": "dumb"}, True, False),
        ({"TERM": "xterm-256color", "NO_COLOR": "1"}, True, False),
        ({"TERM": "xterm-256color", "NO_COLOR": ""}, True, True),  # no-color.org: set *and not empty*
        ({}, True, False),  # no TERM at all: nothing says the terminal understands escapes
        ({"TERM": "xterm-256color"}, False, False),  # a pipe
    ],
    ids=["terminal", "dumb", "no-color", "empty-no-color", "no-term", "pipe"],
)
def test_escape_codes_only_on_a_capable_terminal(
    tmp_path: Path, env: dict[str, str], terminal: bool, coloured: bool
) -> None:
    output = _colour_run(env, terminal=terminal)
    assert b"missing.yaml: no such file" in output
    assert (b"\x1b[" in output) == coloured, output
