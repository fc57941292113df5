"""One test per documented exit code (docs/cli.md): 0 ok, 1 failed, 2 bad config or usage, 3 internal error
with a crash log, 4 environment missing, 5 refused to overwrite, 130 interrupted.

The numbers are written out here on purpose: they are a promise to scripts, not whatever the code says.
"""

from __future__ import annotations

import json
import os
import re
import select
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from homelab.cli import app
from homelab.errors import HomelabError

runner = CliRunner()
CRASH_LINE = re.compile(
    r"^internal error \(ZeroDivisionError: division by zero\); the traceback is in (\S+\.log); please report it$"
)

# A homelab whose plan step is replaced: the CLI as shipped, with a library call that misbehaves.
PATCHED = """
import signal, sys, time, homelab.plan
MODE = sys.argv.pop(1)
# as in a terminal: a shell that started the test run in the background may have set SIGINT to "ignore"
signal.signal(signal.SIGINT, signal.default_int_handler)
def misbehave(*args, **kwargs):
    if MODE == "crash":
        return 1 / 0
    print("ready", flush=True)
    while True:  # until Ctrl-C (not signal.pause(): a SIGINT just before it would be waited for forever)
        time.sleep(0.1)
homelab.plan.build_plan = misbehave
from homelab.cli import main
main()
"""


def _patched(mode: str, *args: str, env: dict[str, str] | None = None, **kwargs) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", PATCHED, mode, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
        **kwargs,
    )


def test_0_ok(example_config: Path) -> None:
    result = runner.invoke(app, ["validate", "-c", str(example_config)])
    assert result.exit_code == 0, result.output


def test_1_failed(example_config: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def fails(*args: object, **kwargs: object) -> None:
        raise HomelabError("the thing failed")

    monkeypatch.setattr("homelab.project.render_project", fails)
    result = runner.invoke(app, ["render", "-c", str(example_config)])
    assert result.exit_code == 1
    assert result.stderr == "error: the thing failed\n"
    assert result.stdout == ""


def test_2_bad_config(tmp_path: Path) -> None:
    (tmp_path / "homelab.yaml").write_text("version: 1\nbogus_key: 1\n")
    result = runner.invoke(app, ["validate"])
    assert result.exit_code == 2
    assert any(line.startswith("homelab.yaml:2: bogus_key: unknown key") for line in result.stderr.splitlines())
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    "argv", [["validate", "--no-such-option"], ["no-such-command"], ["logs"], ["up", "--timeout", "0"]]
)
def test_2_usage(argv: list[str]) -> None:
    result = runner.invoke(app, argv)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output


def test_3_internal_error_names_a_crash_log(example_config: Path, tmp_path: Path) -> None:
    proc = _patched("crash", "validate", "-c", str(example_config), env={"XDG_STATE_HOME": str(tmp_path / "state")})
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 3, stderr
    assert stdout == ""
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    match = CRASH_LINE.match(lines[0])
    assert match, lines[0]
    log = Path(match.group(1))
    assert log.parent == tmp_path / "state" / "homelab"
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    text = log.read_text()
    assert "Traceback (most recent call last)" in text and "ZeroDivisionError: division by zero" in text
    assert "'validate'" in text  # the arguments, to reproduce it


def test_3_crash_log_falls_back_to_the_temp_folder(example_config: Path, tmp_path: Path) -> None:
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("")
    temp = tmp_path / "tmp"
    temp.mkdir()
    proc = _patched(
        "crash", "validate", "-c", str(example_config), env={"XDG_STATE_HOME": str(blocked), "TMPDIR": str(temp)}
    )
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 3, stderr
    match = CRASH_LINE.match(stderr.strip())
    assert match, stderr
    assert Path(match.group(1)).parent == temp
    assert "ZeroDivisionError" in Path(match.group(1)).read_text()


def test_4_environment_missing(example_config: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    result = runner.invoke(app, ["up", "-c", str(example_config)])
    assert result.exit_code == 4, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: Docker"), result.stderr  # engine or CLI missing
    assert not (example_config.parent / "stacks").exists()


def test_5_refused_to_overwrite(tmp_path: Path) -> None:
    (tmp_path / "homelab.yaml").write_text("mine\n")
    result = runner.invoke(app, ["init"])
    assert result.exit_code == 5
    assert result.stderr == "error: homelab.yaml already exists; not overwriting it\n"
    assert (tmp_path / "homelab.yaml").read_text() == "mine\n"


def test_130_interrupted_in_process(example_config: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("homelab.plan.build_plan", interrupted)
    result = runner.invoke(app, ["validate", "-c", str(example_config)])
    assert result.exit_code == 130
    assert result.stderr == "interrupted\n"


def test_143_terminated_in_process(example_config: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from homelab.signals import Terminated

    def terminated(*args: object, **kwargs: object) -> None:
        raise Terminated

    monkeypatch.setattr("homelab.plan.build_plan", terminated)
    result = runner.invoke(app, ["validate", "--json", "-c", str(example_config)])
    assert result.exit_code == 143
    assert result.stderr == "terminated\n"
    assert json.loads(result.stdout) == {"ok": False, "exit_code": 143, "errors": ["terminated"]}


def test_130_ctrl_c(example_config: Path) -> None:
    proc = _patched("wait", "validate", "-c", str(example_config))
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    ready = None
    while ready is None and time.monotonic() < deadline:  # wait for the command to be running, not for a time
        if select.select([proc.stdout], [], [], 1.0)[0]:
            ready = proc.stdout.readline()  # "" at end of file: it exited before getting there
    if ready != "ready\n":
        proc.kill()
        stdout, stderr = proc.communicate(timeout=60)
        raise AssertionError(f"the command never started ({ready!r}, exit {proc.returncode}): {stdout}{stderr}")
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert stderr == "interrupted\n"
    assert stdout == ""


def test_the_documented_table_lists_exactly_these_codes() -> None:
    from homelab.errors import ExitCode
    from tests.conftest import REPO

    text = (REPO / "docs" / "cli.md").read_text()
    table = re.findall(r"^\| (\d+) \|", text, flags=re.MULTILINE)
    assert sorted(int(code) for code in table) == [0, 1, 2, 3, 4, 5, 130, 143]
    assert sorted(int(code) for code in ExitCode) == [0, 1, 2, 3, 4, 5, 130, 143]


def test_a_sub_app_invoked_on_its_own_is_handled_too(tmp_path: Path) -> None:
    from homelab.cli.storage import storage_app

    result = runner.invoke(storage_app, ["plan", "--config", str(tmp_path / "missing.yaml")])
    assert result.exit_code == 2
    assert result.stderr.startswith(f"{tmp_path / 'missing.yaml'}: "), result.stderr
