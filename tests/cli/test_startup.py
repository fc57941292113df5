"""`homelab --help` (and each command's -h, and shell completion, which runs homelab on every Tab) stays
fast: no config models, pydantic, YAML or templates are imported to print help (bench/render.py times it)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = (
    "rich",
    "pydantic",
    "pydantic_core",
    "yaml",
    "jinja2",
    "grafana_foundation_sdk",
    "homelab.config",
    "homelab.plan",
)
PROBE = """
import json, runpy, sys
sys.argv = ["homelab", *sys.argv[1:]]
try:
    runpy.run_module("homelab", run_name="__main__")
except SystemExit:
    pass
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""


def _imported(*argv: str, env: dict[str, str] | None = None) -> set[str]:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, check=True, env=env, timeout=60
    )
    return set(json.loads(proc.stderr.strip().splitlines()[-1]))


def _heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))


@pytest.mark.parametrize(
    "argv", [["--help"], ["-h"], ["validate", "-h"], ["backup", "restore", "-h"], ["monitor", "-h"], ["--version"]]
)
def test_help_imports_nothing_heavy(argv: list[str]) -> None:
    modules = _imported(*argv)
    assert "homelab.cli" in modules  # the probe did run homelab
    assert _heavy(modules) == []


def test_completion_imports_nothing_heavy() -> None:
    import os

    env = {**os.environ, "_HOMELAB_COMPLETE": "complete_bash", "COMP_WORDS": "homelab st", "COMP_CWORD": "1"}
    assert _heavy(_imported(env=env)) == []


def test_validate_does_import_the_models(example_config) -> None:  # the probe itself can see them
    assert "pydantic" in _imported("validate", "-c", str(example_config))
