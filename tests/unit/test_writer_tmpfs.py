"""The writer on a real small file system (a tmpfs mounted for the test): a full disk, on the first
render and on a re-render with 8 KiB left, and a read-only folder leave the previous output
byte-identical, and the command says which path and which OS error in one line (exit 1)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from homelab.cli import app
from homelab.cli import commands as _commands  # noqa: F401 - registers the commands
from homelab.errors import WriteFailed
from tests.conftest import missing
from tests.unit.test_writer import change_timezone, leftovers, snapshot

pytestmark = pytest.mark.real
runner = CliRunner()


def _mount(*args: str) -> None:
    proc = subprocess.run(["mount", *args], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        missing(f"mounting a tmpfs (needs root): {proc.stderr.strip()}")


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    if shutil.which("mount") is None or os.geteuid() != 0:
        missing("root and mount(8), to mount a small tmpfs")
    point = tmp_path / "fs"
    point.mkdir()
    yield point
    subprocess.run(["umount", str(point)], check=False)


def _render(config: Path, out: Path) -> tuple[int, str]:
    result = runner.invoke(app, ["render", "-c", str(config), "--out", str(out)])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.stderr


def _size(tree: Path) -> int:
    return sum(p.stat().st_size for p in tree.rglob("*") if p.is_file())


def test_full_disk_on_the_first_render(small_fs: Path, example_config: Path) -> None:
    _mount("-t", "tmpfs", "-o", "size=64k", "tmpfs", str(small_fs))
    code, stderr = _render(example_config, small_fs / "stacks")
    assert code == WriteFailed.exit_code == 1
    assert stderr.startswith(f"error: cannot write {small_fs}/stacks/")
    assert stderr.endswith(": No space left on device; the previous output is unchanged\n")
    assert stderr.count("\n") == 1
    assert list(small_fs.iterdir()) == []


def test_full_disk_on_a_rerender_with_8k_left(small_fs: Path, example_config: Path, tmp_path: Path) -> None:
    # measure the output first, so the file system fits it with room for the filler
    runner.invoke(app, ["render", "-c", str(example_config), "--out", str(tmp_path / "measure")])
    size_kib = _size(tmp_path / "measure") // 1024 * 2 + 256
    _mount("-t", "tmpfs", "-o", f"size={size_kib}k", "tmpfs", str(small_fs))
    out = small_fs / "stacks"
    assert _render(example_config, out)[0] == 0
    free = os.statvfs(small_fs)
    filler = small_fs / "filler"
    with filler.open("wb") as handle:
        handle.write(b"\0" * (free.f_bavail * free.f_frsize - 8192))
    assert os.statvfs(small_fs).f_bavail * os.statvfs(small_fs).f_frsize == 8192
    before = snapshot(out)
    change_timezone(example_config)  # rewrites every compose file: far more than 8 KiB
    code, stderr = _render(example_config, out)
    assert code == 1, stderr
    assert stderr.endswith(": No space left on device; the previous output is unchanged\n")
    assert snapshot(out) == before
    assert leftovers(out) == []


def test_read_only_folder(small_fs: Path, example_config: Path) -> None:
    _mount("-t", "tmpfs", "-o", "size=4m", "tmpfs", str(small_fs))
    out = small_fs / "stacks"
    assert _render(example_config, out)[0] == 0
    _mount("-o", "remount,ro", str(small_fs))
    before = snapshot(out)
    assert _render(example_config, out)[0] == 0  # nothing to change: a read-only output is fine
    change_timezone(example_config)
    code, stderr = _render(example_config, out)
    assert code == 1
    assert stderr.startswith(f"error: cannot write {out}/")
    assert stderr.endswith(": Read-only file system; the previous output is unchanged\n")
    assert snapshot(out) == before


def test_read_only_folder_on_the_first_render(small_fs: Path, example_config: Path) -> None:
    _mount("-t", "tmpfs", "-o", "size=4m,ro", "tmpfs", str(small_fs))
    code, stderr = _render(example_config, small_fs / "stacks")
    assert code == 1
    assert stderr == f"error: cannot write {small_fs}/stacks: Read-only file system; the previous output is unchanged\n"
