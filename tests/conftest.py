"""Shared fixtures. Tests are hermetic: every file lives under tmp_path.

Real components: a test that needs a program calls `require_program("nginx")` (or the `real`/`docker`
markers' helpers). On a developer's laptop a missing program skips the test; in CI (CI=true) it FAILS,
so a broken setup can never pass as "all skipped".
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "homelab.yaml"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
VENV_BIN = Path(sys.executable).parent
sys.path.insert(0, str(REPO / "tests" / "docker"))  # dockerlab, standins: for tests/docker and tests/swarm


def pytest_configure(config: pytest.Config) -> None:
    # The docker fixtures (tests/docker/dockerlab.py: the engine lock, Pebble, the built images) are
    # session-wide for tests/docker and tests/swarm alike: registered once here, so a session running both
    # takes the engine lock once and builds the images once.
    config.pluginmanager.register(importlib.import_module("dockerlab"), "dockerlab")


@pytest.hookimpl(tryfirst=True)  # before -m selects: .ci/run selects with `zfs`
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """`zfs` on every test of the zfs-fuse daemon: its session fixture holds the machine lock until the session
    ends, so .ci/run runs them all in the Docker tests' session (which uses the daemon too), and the other
    real-program tests in a second session beside it."""
    for item in items:
        if "zfs_daemon" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.zfs)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-golden", action="store_true", help="Rewrite golden files from the current code.")


def missing(what: str) -> None:
    """Skip on a laptop, fail in CI."""
    if IN_CI:
        pytest.fail(f"{what} is required in CI but missing (run scripts/install-test-deps)", pytrace=False)
    pytest.skip(f"{what} not available")


@contextlib.contextmanager
def machine_lock(name: str) -> Iterator[None]:
    """Held while a test session uses a machine-wide resource (the Docker engine, the zfs-fuse daemon)."""
    with Path(f"/tmp/{name}.lock").open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def find_program(name: str) -> str | None:
    for candidate in (VENV_BIN / name, Path("/usr/sbin") / name, Path("/sbin") / name):
        if candidate.exists():
            return str(candidate)
    return shutil.which(name)


@pytest.fixture
def require_program():
    def _require(name: str) -> str:
        path = find_program(name)
        if path is None:
            missing(f"program {name!r}")
        return path  # type: ignore[return-value]

    return _require


def write_secret(path: Path, value: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(value + "\n")
    return path


EXAMPLE_SECRETS = ("ddns-password", "b2-account", "b2-key")


@pytest.fixture
def example_dir(tmp_path: Path) -> Path:
    """A copy of examples/ with its secret files (0600) written: the bundled example, ready to render."""
    target = tmp_path / "examples"
    target.mkdir()
    shutil.copy(EXAMPLE, target / "homelab.yaml")
    for name in EXAMPLE_SECRETS:
        write_secret(target / "secrets" / name, f"example-{name}-value")
    return target


@pytest.fixture
def example_config(example_dir: Path) -> Path:
    return example_dir / "homelab.yaml"


@pytest.fixture(autouse=True)
def _hermetic(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Keep tests off the real home directory and any homelab.yaml in the working directory."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("HOMELAB_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
