"""The bad-config corpus: each case exits 2 with the exact location and message, prints no traceback,
writes nothing, and never shows a secret (the canary in every secret file, or a password pasted where
a file name belongs), at any verbosity. Cases: tests/fixtures/bad/<case>.yaml, plus GENERATED below
(binary or large); the expected line of each is in tests/fixtures/bad/expected.tsv."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from homelab.cli import app
from homelab.cli import commands as _commands  # noqa: F401 - registers the commands
from tests.conftest import REPO, write_secret

BAD = REPO / "tests" / "fixtures" / "bad"
CANARY = "CANARY-7f3e9c1d-never-print-me"
BASE = (BAD / "typo-key.yaml").read_text().split("monitoring:")[0]  # version, server, domain: 7 lines


def _laughs(levels: int) -> bytes:
    """Each level is nine aliases of the one before: 9**levels values from a few hundred bytes."""
    lines = ['l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"l{i}: &l{i} [" + ",".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, levels)]
    return (BASE + "\n".join(lines) + "\n").encode()


GENERATED: dict[str, Callable[[], bytes]] = {
    "too-large": lambda: (BASE + "images:\n" + "".join(f"  s{i}: nginx:1.{i}\n" for i in range(20_000))).encode(),
    "too-many-values": lambda: (BASE + "x: [" + "1," * 25_000 + "1]\n").encode(),
    "nul-byte": lambda: b"version: 1\nserver:\n  hostname: n\x00as\n",
    "config-not-utf8": lambda: (BASE + "server2:\n  hostname: n").encode() + b"\xffas\n",
    # 9**40 values if expanded: refused while composing, so this returns at once instead of never
    "deep-laughs": lambda: _laughs(40),
}

SECRET_FILES: dict[str, bytes] = {
    "canary": f"{CANARY}\n".encode(),
    "readable": f"{CANARY}\n".encode(),
    "empty": b"",
    "only-newline": b"\n",
    "single-quote": f"{CANARY}'x\n".encode(),
    "double-quote": f'{CANARY}"x\n'.encode(),
    "backslash": f"{CANARY}\\x\n".encode(),
    "backquote": f"`{CANARY}`\n".encode(),
    "two-lines": f"{CANARY}\nsecond\n".encode(),
    "not-utf8": CANARY.encode() + b"\xff\n",
    "bell": f"{CANARY}\a\n".encode(),
    "leading-blank": f" {CANARY}\n".encode(),
    "large": CANARY.encode() * 3000,
}


def _expected() -> dict[str, str]:
    rows = (line.split("\t") for line in (BAD / "expected.tsv").read_text().splitlines() if not line.startswith("#"))
    return dict((case, message) for case, message in rows)


EXPECTED = _expected()
# cases about secrets also run through every command that loads the config, at debug verbosity
SECRET_CASES = sorted(c for c in EXPECTED if c.startswith(("secret-", "password-", "canary-")))


def test_corpus_is_complete() -> None:
    cases = {p.stem for p in BAD.glob("*.yaml")} | set(GENERATED)
    assert sorted(cases) == sorted(EXPECTED)
    assert len(cases) >= 80


def _workdir(tmp_path: Path, case: str) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    config = work / "homelab.yaml"
    if case in GENERATED:
        config.write_bytes(GENERATED[case]())
    else:
        shutil.copy(BAD / f"{case}.yaml", config)
    for name, content in SECRET_FILES.items():
        write_secret(work / "secrets" / name, "")
        (work / "secrets" / name).write_bytes(content)
    (work / "secrets" / "readable").chmod(0o644)
    (work / "secrets" / "folder").mkdir(mode=0o700)
    return work


def _tree(root: Path) -> dict[str, tuple[int, bytes | None]]:
    return {
        str(p.relative_to(root)): (p.lstat().st_mode, p.read_bytes() if p.is_file() else None)
        for p in sorted(root.rglob("*"))
    }


def _check(tmp_path: Path, case: str, args: list[str], caplog: pytest.LogCaptureFixture) -> None:
    work = _workdir(tmp_path, case)
    os.chdir(work)
    before = _tree(work)
    result = CliRunner().invoke(app, [*args, "-c", "homelab.yaml"])
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.stderr.strip() == EXPECTED[case]
    assert result.stdout == ""
    assert "Traceback" not in result.output
    assert _tree(work) == before  # nothing written, not even a stacks folder
    assert CANARY not in result.output + caplog.text


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_validate(tmp_path: Path, case: str, caplog: pytest.LogCaptureFixture) -> None:
    _check(tmp_path, case, ["validate"], caplog)


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_render_at_debug_verbosity(tmp_path: Path, case: str, caplog: pytest.LogCaptureFixture) -> None:
    _check(tmp_path, case, ["-vv", "render"], caplog)


@pytest.mark.parametrize("command", ["plan", "doctor"])
@pytest.mark.parametrize("case", SECRET_CASES)
def test_secret_cases_in_other_commands(
    tmp_path: Path, case: str, command: str, caplog: pytest.LogCaptureFixture
) -> None:
    _check(tmp_path, case, ["-vv", command], caplog)


def test_many_problems_are_all_reported_in_file_order(tmp_path: Path) -> None:
    config = tmp_path / "homelab.yaml"
    config.write_text(
        "version: 1\nserver:\n  hostname: nas\n  gid: -1\ndomain:\n  name: localhost\n  acme:\n    email: nope\n"
    )
    result = CliRunner().invoke(app, ["validate", "-c", str(config)])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        f"{config}:4: server.gid: Input should be greater than or equal to 0",
        f"{config}:6: domain.name: 'localhost' is not a valid domain name (e.g. example.com)",
        f"{config}:8: domain.acme.email: 'nope' is not an email address",
    ]


def test_missing_config_file(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["validate", "-c", str(tmp_path / "nope.yaml")])
    assert result.exit_code == 2
    assert result.stderr.strip() == f"{tmp_path / 'nope.yaml'}: no such file (create one with `homelab init`)"


def test_config_that_is_a_folder(tmp_path: Path) -> None:
    (tmp_path / "homelab.yaml").mkdir()
    result = CliRunner().invoke(app, ["validate", "-c", str(tmp_path / "homelab.yaml")])
    assert result.exit_code == 2
    assert result.stderr == f"{tmp_path / 'homelab.yaml'}: cannot read: it is a folder, not a regular file\n"
