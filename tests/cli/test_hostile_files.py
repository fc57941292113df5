"""Hostile file-system states around the files homelab reads (issue 32): each ends in a clear message and
a documented exit code, never a hang, a traceback or exit 3. The program runs as a subprocess with a
timeout, so a read that blocks (a FIFO) fails the test instead of hanging the suite."""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import write_secret

BASE = "version: 1\nserver:\n  hostname: nas\ndomain:\n  name: example.com\n  acme:\n    email: a@example.com\n"
DDNS = "ddns:\n  provider: cloudflare\n  login: token\n  password_file: secrets/ddns\n"


def _homelab(
    *args: str, cwd: Path, timeout: float = 60, user: int | None = None, limit_memory: int | None = None
) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "homelab", *args]
    if user is not None:
        argv = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", *argv]

    def _limit() -> None:
        if limit_memory is not None:
            resource.setrlimit(resource.RLIMIT_AS, (limit_memory, limit_memory))

    env = {**os.environ, "XDG_STATE_HOME": str(cwd / ".state"), "HOME": str(cwd)}
    env.pop("HOMELAB_CONFIG", None)
    return subprocess.run(
        argv, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env, check=False, preexec_fn=_limit
    )


def _clean(result: subprocess.CompletedProcess[str], code: int) -> str:
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr + result.stdout
    assert "internal error" not in result.stderr
    return result.stderr.strip()


def test_a_fifo_given_as_the_config_does_not_hang(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo.yaml")
    message = _clean(_homelab("validate", "-c", "fifo.yaml", cwd=tmp_path, timeout=20), 2)
    assert message == "fifo.yaml: cannot read: it is a named pipe (FIFO), not a regular file"


def test_a_fifo_as_the_sensor_inventory_does_not_hang(tmp_path: Path) -> None:
    (tmp_path / "homelab.yaml").write_text(BASE + "monitoring:\n  inventory: inventory.yaml\n")
    os.mkfifo(tmp_path / "inventory.yaml")
    message = _clean(_homelab("plan", cwd=tmp_path, timeout=20), 2)
    assert message == f"{tmp_path}/inventory.yaml: cannot read: it is a named pipe (FIFO), not a regular file"


def test_a_symlink_loop_as_the_inventory_is_named_not_ignored(tmp_path: Path) -> None:
    (tmp_path / "homelab.yaml").write_text(BASE + "monitoring:\n  inventory: inventory.yaml\n")
    (tmp_path / "inventory.yaml").symlink_to("inventory.yaml")
    message = _clean(_homelab("plan", cwd=tmp_path), 2)
    assert message == f"{tmp_path}/inventory.yaml: cannot read: a symbolic link loop"


def test_a_secret_that_is_a_symlink_loop_is_a_config_error_without_its_path(tmp_path: Path) -> None:
    (tmp_path / "homelab.yaml").write_text(BASE + DDNS.replace("secrets/ddns", "secrets/private-name-x7"))
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "private-name-x7").symlink_to("private-name-x7")
    for command in ("validate", "render"):
        result = _homelab(command, cwd=tmp_path)
        message = _clean(result, 2)
        assert message == "homelab.yaml:11: ddns.password_file: the secret file cannot be read (a symbolic link loop)"
        assert "private-name-x7" not in result.stdout + result.stderr


def test_a_symlink_loop_as_homelab_yaml_stops_the_search(tmp_path: Path) -> None:
    """The parent's config must not be used (and rendered into) when the working folder's is broken."""
    (tmp_path / "homelab.yaml").write_text(BASE)
    work = tmp_path / "sub"
    work.mkdir()
    (work / "homelab.yaml").symlink_to("homelab.yaml")
    message = _clean(_homelab("render", cwd=work), 2)
    assert message == "homelab.yaml: cannot read: a symbolic link loop"
    assert not (tmp_path / "stacks").exists() and not (work / "stacks").exists()


def test_a_fifo_where_an_output_file_goes_does_not_hang(tmp_path: Path) -> None:
    (tmp_path / "homelab.yaml").write_text(BASE)
    (tmp_path / "stacks" / "edge").mkdir(parents=True)
    os.mkfifo(tmp_path / "stacks" / "edge" / "compose.yaml")
    result = _homelab("render", cwd=tmp_path, timeout=30)
    assert "stacks/edge/compose.yaml" in _clean(result, 5)  # not ours: refused, as any foreign file


def test_a_huge_file_where_an_output_goes_is_not_read_whole(tmp_path: Path) -> None:
    (tmp_path / "homelab.yaml").write_text(BASE)
    (tmp_path / "stacks" / "edge").mkdir(parents=True)
    with (tmp_path / "stacks" / "edge" / "compose.yaml").open("wb") as handle:
        handle.truncate(4 * 1024**3)  # sparse: 4 GiB that take no disk
    result = _homelab("render", cwd=tmp_path, limit_memory=2 * 1024**3)
    assert "stacks/edge/compose.yaml" in _clean(result, 5)


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A folder another user can enter (tmp_path's parents are private to root)."""
    folder = Path(tempfile.mkdtemp(prefix="homelab-hostile-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder)


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv")
def test_an_output_secret_another_user_owns_is_a_clean_error(shared_dir: Path) -> None:
    """Rendered once with sudo, then run as a user who cannot read the generated secrets."""
    (shared_dir / "homelab.yaml").write_text(BASE)
    assert _homelab("render", cwd=shared_dir).returncode == 0
    (shared_dir / ".state").mkdir(mode=0o777)
    (shared_dir / "stacks" / "secrets").chmod(0o755)  # the folder readable, the 0600 files in it not
    result = _homelab("render", cwd=shared_dir, user=65534)
    message = _clean(result, 2)
    assert message.startswith(f"error: cannot read {shared_dir}/stacks/secrets/"), message
    assert "permission denied: the current user may not read it; it holds a secret an earlier render" in message


def test_a_secret_file_too_large_is_refused_before_reading(tmp_path: Path) -> None:
    (tmp_path / "homelab.yaml").write_text(BASE + DDNS)
    write_secret(tmp_path / "secrets" / "ddns", "x")
    with (tmp_path / "secrets" / "ddns").open("r+b") as handle:
        handle.truncate(4 * 1024**3)
    result = _homelab("validate", cwd=tmp_path, limit_memory=2 * 1024**3)
    assert _clean(result, 2) == "homelab.yaml:11: ddns.password_file: the secret file is larger than 64 KiB"
