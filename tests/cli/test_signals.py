"""SIGINT and SIGTERM at many instants of `render` and of `up` (against the fakes), and several renders at once
into one folder (issue 32). Each run is a real process; after each, the output folder is either the previous
complete output or the new one, no staged file or lock is left, the exit code is the documented one (0 when
the run finished first, 130 for SIGINT, 143 for SIGTERM) and nothing printed a traceback.

The instants are spread evenly over one measured run, so every phase (homelab's start-up, loading,
rendering, the write, the engine) gets signals; the trials are bounded to keep this under a minute. They
start once the interpreter itself is up: a signal while Python is still importing its own `runpy` (before
any line of homelab runs) gets Python's traceback, and no program written in Python can prevent that."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO

TRIALS = 6  # per scenario, alternating SIGINT and SIGTERM
CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}
WORDS = {signal.SIGINT: "interrupted", signal.SIGTERM: "terminated"}
LEFTOVERS = (".homelab-new", ".homelab-old", ".homelab.lock")


def _start(folder: Path, *args: str, fakes: bool = False) -> subprocess.Popen[str]:
    module = "tests.fakes.run_with_fakes" if fakes else "homelab"
    env = {**os.environ, "XDG_STATE_HOME": str(folder / ".state"), "PYTHONPATH": str(REPO)}
    env.pop("HOMELAB_CONFIG", None)
    return subprocess.Popen(
        [sys.executable, "-m", module, *args],
        cwd=folder,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _tree(root: Path) -> dict[str, bytes | None]:
    stacks = root / "stacks"
    if not stacks.exists():
        return {}
    return {str(p.relative_to(stacks)): p.read_bytes() if p.is_file() else None for p in sorted(stacks.rglob("*"))}


def _leftovers(root: Path) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.name.endswith(LEFTOVERS)]


def _folder(tmp_path: Path, example_config: Path, name: str) -> Path:
    folder = tmp_path / name
    shutil.copytree(example_config.parent, folder)
    config = folder / "homelab.yaml"
    config.write_text(config.read_text().replace("mountpoint: /tank/homelab", f"mountpoint: {folder / 'tank'}"))
    return folder


def _changed(folder: Path) -> None:
    """A new config: another edge port (compose files change) and another image (one stack)."""
    config = folder / "homelab.yaml"
    config.write_text(config.read_text() + "images:\n  gitea: gitea/gitea:1.22.0\n")


def _staging(folder: Path, process: subprocess.Popen[str]) -> None:
    """Return once the writer has staged its first file (or the process ended): the middle of the write."""
    stacks = folder / "stacks"
    while process.poll() is None:
        if stacks.is_dir() and any(p.name.endswith(".homelab-new") for p in stacks.rglob(".*")):
            return
        time.sleep(0.001)


def _run(process: subprocess.Popen[str], delay: float | Path, signum: int) -> tuple[int, str, str]:
    """Send `signum` after `delay` seconds, or, given the process's folder, in the middle of its write."""
    if isinstance(delay, Path):
        _staging(delay, process)
    else:
        time.sleep(delay)
    process.send_signal(signum)
    out, err = process.communicate(timeout=120)
    return process.returncode, out, err


def _check_exit(code: int, err: str, signum: int) -> None:
    assert "Traceback" not in err and "internal error" not in err, err
    if code == -signum:
        # ended by the signal itself: before Python ran a line of homelab (then silent), or, when coverage
        # measures this process, after homelab's line (its start-up hooks); the shell reports 128+n
        assert err in ("", f"{WORDS[signum]}\n"), err
    elif code != 0:
        assert code == CODES[signum], (code, err)
        assert err.strip().splitlines()[-1] == WORDS[signum], err


def _interpreter_start() -> float:
    """How long the bare interpreter takes to come up here and now (1.5 times, for the machine's jitter)."""
    began = time.monotonic()
    subprocess.run([sys.executable, "-c", "import runpy, importlib.util"], check=True)
    return 1.5 * (time.monotonic() - began)


def _instant(start: float, duration: float, trial: int) -> float:
    return start + (duration - start) * (trial + 0.5) / TRIALS


def _timed(folder: Path, *args: str, fakes: bool = False) -> tuple[float, dict[str, bytes | None]]:
    """One undisturbed run: how long it takes, and the output it leaves."""
    began = time.monotonic()
    process = _start(folder, *args, fakes=fakes)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, out + err
    return time.monotonic() - began, _tree(folder)


@pytest.mark.parametrize("fresh", [True, False], ids=["fresh-folder", "update"])
def test_signals_during_render_leave_the_old_or_the_new_output(
    tmp_path: Path, example_config: Path, fresh: bool
) -> None:
    base = _folder(tmp_path, example_config, "base")
    if not fresh:
        _timed(base, "render")
    previous = _tree(base)
    measure = tmp_path / "measure"
    shutil.copytree(base, measure)
    _changed(measure)
    duration, new = _timed(measure, "render")
    for trial in range(TRIALS + 2):
        folder = tmp_path / f"trial{trial}"
        shutil.copytree(base, folder)
        _changed(folder)
        signum = (signal.SIGINT, signal.SIGTERM)[trial % 2]
        at: float | Path = _instant(_interpreter_start(), duration, trial) if trial < TRIALS else folder  # 2: mid-write
        code, _, err = _run(_start(folder, "render"), at, signum)
        _check_exit(code, err, signum)
        if trial >= TRIALS:
            assert code in (CODES[signum], -signum, 0), (trial, code, err)  # the write finished, then the signal
        assert _leftovers(folder) == [], (trial, code)
        after = _tree(folder)
        if fresh and after:  # generated passwords differ from run to run: the second render must find it whole
            again = _start(folder, "render").communicate(timeout=120)[0]
            assert again.startswith("no changes"), (trial, code, again)
            assert sorted(after) == sorted(new), (trial, code)
        else:
            assert after in (previous, new), (trial, code, sorted(set(after) ^ set(new)))
        assert code != 0 or after != previous or previous == new  # it finished: the new output is there
        assert trial < TRIALS or (after and after != previous)  # signalled mid-write: the write still finished
        shutil.rmtree(folder)


def test_signals_during_up_against_the_fakes(tmp_path: Path, example_config: Path) -> None:
    base = _folder(tmp_path, example_config, "base")
    _timed(base, "render")
    previous = _tree(base)
    measure = tmp_path / "measure"
    shutil.copytree(base, measure)
    _changed(measure)
    duration, new = _timed(measure, "up", fakes=True)
    for trial in range(TRIALS):
        folder = tmp_path / f"trial{trial}"
        shutil.copytree(base, folder)
        _changed(folder)
        signum = (signal.SIGTERM, signal.SIGINT)[trial % 2]
        code, _, err = _run(_start(folder, "up", fakes=True), _instant(_interpreter_start(), duration, trial), signum)
        _check_exit(code, err, signum)
        assert _leftovers(folder) == [], (trial, code)
        assert _tree(folder) in (previous, new), trial
        shutil.rmtree(folder)


def test_a_signal_during_validate_json_still_prints_one_json_document(tmp_path: Path, example_config: Path) -> None:
    import json

    folder = _folder(tmp_path, example_config, "base")
    duration, _ = _timed(folder, "validate", "--json")
    for trial in range(4):
        signum = (signal.SIGINT, signal.SIGTERM)[trial % 2]
        at = _interpreter_start()
        code, out, err = _run(_start(folder, "validate", "--json"), at + (duration - at) * (trial + 0.5) / 4, signum)
        _check_exit(code, err, signum)
        if code > 0:
            document = json.loads(out)  # exactly one document: a second would not parse
            assert document["exit_code"] == code and document["ok"] is False, document
        elif code == 0:
            assert json.loads(out)["ok"] is True


@pytest.mark.parametrize("round_", range(3))
def test_concurrent_renders_into_one_fresh_folder(tmp_path: Path, example_config: Path, round_: int) -> None:
    folder = _folder(tmp_path, example_config, f"round{round_}")
    runs = [_start(folder, "render") for _ in range(5)]  # started together: they reach the write together
    outputs = [p.communicate(timeout=180) for p in runs]
    results = [(p.returncode, out, err) for p, (out, err) in zip(runs, outputs, strict=True)]
    for code, out, err in results:
        assert "Traceback" not in err
        assert code == 0 or (code == 5 and "another homelab is writing in" in err and "pid " in err), (code, out, err)
    assert any(code == 0 for code, _, _ in results)
    assert _leftovers(folder) == []
    again = _start(folder, "render").communicate(timeout=120)[0]
    assert again.startswith("no changes"), again  # one whole, consistent output


def test_a_second_writer_refuses_with_exit_5_naming_the_holder(tmp_path: Path, example_config: Path) -> None:
    from homelab import folderlock

    folder = _folder(tmp_path, example_config, "base")
    with folderlock.holding(folder, "render"):
        env = {**os.environ, "XDG_STATE_HOME": str(folder / ".state")}
        done = subprocess.run(
            [sys.executable, "-c", "from homelab import folderlock as f; f.WAIT_SECONDS = 0.2\n"
             "from homelab.entry import main; main()", "render"],
            cwd=folder, env=env, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        reads = _start(folder, "validate").communicate(timeout=120)  # a reader does not wait
    assert done.returncode == 5, done.stderr
    assert done.stderr.strip() == (
        f"error: another homelab is writing in {folder} (pid {os.getpid()}: homelab render, since "
        f"{done.stderr.split('since ')[1].split(')')[0]}); try again when it is done"
    )
    assert "ok" in reads[0]
    assert not (folder / ".homelab.lock").exists()  # released and removed
