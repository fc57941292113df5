"""CLI conventions (docs/cli.md): -h everywhere, -v/-q before or after the subcommand, the config found up
the parent folders like git, colour only on a terminal and never with NO_COLOR."""

from __future__ import annotations

import logging
import os
import pty
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from homelab.cli import app

runner = CliRunner()
HOMELAB = [sys.executable, "-m", "homelab"]


def _command_paths() -> list[list[str]]:
    paths: list[list[str]] = [[]]

    def walk(command: object, prefix: list[str]) -> None:
        for name, sub in getattr(command, "commands", {}).items():
            paths.append([*prefix, name])
            walk(sub, [*prefix, name])

    walk(get_command(app), [])
    return paths


@pytest.mark.parametrize("path", _command_paths(), ids=lambda p: " ".join(p) or "homelab")
def test_dash_h_is_help_everywhere(path: list[str]) -> None:
    short = runner.invoke(app, [*path, "-h"], prog_name="homelab")
    assert short.exit_code == 0, short.output
    assert short.stdout == runner.invoke(app, [*path, "--help"], prog_name="homelab").stdout
    assert short.stdout.startswith(f"Usage: homelab {' '.join(path)}".rstrip() + " ")
    assert "-v, --verbose" in short.stdout and "-q, --quiet" in short.stdout


@pytest.fixture
def root_level() -> Iterator[None]:
    logger = logging.getLogger()
    before = logger.level
    yield
    logger.setLevel(before)


@pytest.mark.usefixtures("root_level")
@pytest.mark.parametrize(
    ("flags", "level"),
    [
        (["-v"], logging.INFO),
        (["-vv"], logging.DEBUG),
        (["--verbose", "--verbose", "--verbose"], logging.DEBUG),
        (["-q"], logging.ERROR),
        (["--quiet"], logging.ERROR),
        ([], logging.WARNING),
    ],
)
@pytest.mark.parametrize("where", ["before", "after"])
def test_verbosity_before_or_after_the_subcommand(
    example_config: Path, flags: list[str], level: int, where: str
) -> None:
    command = ["validate", "-c", str(example_config)]
    argv = [*flags, *command] if where == "before" else [*command, *flags]
    result = runner.invoke(app, argv)
    assert result.exit_code == 0, result.output
    assert logging.getLogger().level == level


@pytest.mark.usefixtures("root_level")
def test_verbosity_in_a_nested_group(example_config: Path) -> None:
    result = runner.invoke(app, ["backup", "schedule", "print", "-c", str(example_config), "-vv"])
    assert result.exit_code == 0, result.output
    assert logging.getLogger().level == logging.DEBUG


def test_config_is_found_in_a_parent_folder(example_config: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    deep = example_config.parent / "a" / "b"
    deep.mkdir(parents=True)
    monkeypatch.chdir(deep)
    result = runner.invoke(app, ["validate"])
    assert result.exit_code == 0, result.output
    assert result.stdout == "../../homelab.yaml: ok\n"


def test_the_nearest_config_wins(example_config: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (example_config.parent.parent / "homelab.yaml").write_text("not: [a, valid config\n")
    monkeypatch.chdir(example_config.parent)
    result = runner.invoke(app, ["validate"])
    assert result.exit_code == 0, result.output
    assert result.stdout == "homelab.yaml: ok\n"


def test_explicit_config_turns_the_search_off(example_config: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    deep = example_config.parent / "a"
    deep.mkdir()
    monkeypatch.chdir(deep)
    assert runner.invoke(app, ["validate", "-c", "missing.yaml"]).exit_code == 2
    monkeypatch.setenv("HOMELAB_CONFIG", "missing.yaml")
    result = runner.invoke(app, ["validate"])
    assert result.exit_code == 2
    assert result.stderr.startswith("missing.yaml: "), result.stderr


def test_no_config_anywhere_names_the_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.chdir(empty)
    result = runner.invoke(app, ["plan"])
    assert result.exit_code == 2
    assert result.stderr.startswith("homelab.yaml: "), result.stderr


def test_init_writes_here_even_when_a_parent_has_a_config(
    example_config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    here = example_config.parent / "new"
    here.mkdir()
    monkeypatch.chdir(here)
    result = runner.invoke(app, ["init"])
    assert result.exit_code == 0, result.output
    assert (here / "homelab.yaml").is_file()


def _stderr_on_a_terminal(argv: list[str], env: dict[str, str]) -> bytes:
    """Run homelab with stderr on a pseudo-terminal; everything it wrote there."""
    controller, terminal = pty.openpty()
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=terminal, env=env)
        os.close(terminal)
        output = b""
        while True:
            try:
                chunk = os.read(controller, 4096)
            except OSError:  # EIO: the terminal's other side is closed, the program is done
                break
            if not chunk:
                break
            output += chunk
        proc.wait(timeout=60)
    finally:
        os.close(controller)
    return output


@pytest.fixture
def env_without_no_color() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "NO_COLOR"}


def test_errors_are_coloured_on_a_terminal(env_without_no_color: dict[str, str]) -> None:
    output = _stderr_on_a_terminal([*HOMELAB, "validate", "-c", "missing.yaml"], env_without_no_color)
    assert b"\x1b[31m" in output and b"missing.yaml" in output


def test_no_color_turns_colour_off(env_without_no_color: dict[str, str]) -> None:
    output = _stderr_on_a_terminal(
        [*HOMELAB, "validate", "-c", "missing.yaml"], {**env_without_no_color, "NO_COLOR": "1"}
    )
    assert b"missing.yaml" in output and b"\x1b[" not in output


def test_no_colour_into_a_pipe(env_without_no_color: dict[str, str]) -> None:
    proc = subprocess.run(
        [*HOMELAB, "validate", "-c", "missing.yaml"], capture_output=True, env=env_without_no_color, check=False
    )
    assert proc.returncode == 2
    assert b"missing.yaml" in proc.stderr and b"\x1b[" not in proc.stderr


def test_python_dash_m_and_the_console_script_agree() -> None:
    script = shutil.which("homelab", path=str(Path(sys.executable).parent))
    assert script is not None
    a = subprocess.run([script, "-h"], capture_output=True, text=True, check=True)
    b = subprocess.run([*HOMELAB, "-h"], capture_output=True, text=True, check=True)
    assert a.stdout == b.stdout


@pytest.mark.usefixtures("root_level")
@pytest.mark.parametrize(("flags", "steps"), [([], True), (["-q"], False), (["-v", "-q", "-q"], False)])
def test_quiet_leaves_out_the_progress(
    example_config: Path, monkeypatch: pytest.MonkeyPatch, flags: list[str], steps: bool
) -> None:
    def down(plan: object, out: object, docker: object, selected: object, *, progress) -> list[str]:
        progress("  stopping edge")
        return ["edge"]

    monkeypatch.setattr("homelab.runtime.docker.Docker.check", lambda self: None)
    monkeypatch.setattr("homelab.engine.compose.down", down)
    result = runner.invoke(app, ["down", "-c", str(example_config), *flags])
    assert result.exit_code == 0, result.output
    expected = ["  stopping edge"] if steps else []
    assert result.stdout.splitlines() == [*expected, "down: edge stopped; data kept"]
