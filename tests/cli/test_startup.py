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


@pytest.mark.parametrize(
    ("argv", "commands", "groups"),
    [
        (["validate", "-c", "x.yaml"], ["validate"], []),
        (["-v", "plan", "--json"], ["plan"], []),
        (["backup", "status", "-h"], [], ["backup"]),
    ],
)
def test_a_run_builds_only_the_command_it_names(argv: list[str], commands: list[str], groups: list[str]) -> None:
    from homelab.cli import _only_the_named_command

    app = _only_the_named_command(argv)
    assert [c.callback.__name__ for c in app.registered_commands if c.callback] == commands
    assert [g.name for g in app.registered_groups] == groups


@pytest.mark.parametrize("argv", [[], ["--help"], ["-h", "validate"], ["--version", "plan"], ["valdate"], ["-v"]])
def test_listings_help_and_did_you_mean_see_every_command(argv: list[str]) -> None:
    from homelab.cli import _only_the_named_command, app

    assert _only_the_named_command(argv) is app


def test_completion_sees_every_command(monkeypatch: pytest.MonkeyPatch) -> None:
    from homelab.cli import _only_the_named_command, app

    monkeypatch.setenv("_HOMELAB_COMPLETE", "complete_bash")
    assert _only_the_named_command(["backup"]) is app


def test_a_narrowed_run_answers_as_the_whole_app_does() -> None:
    # through main(), as the console script runs it (the probes above run commands through it too)
    argv = [sys.executable, "-m", "homelab", "validate", "--bogus"]
    usage = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert usage.returncode == 2 and "No such option: --bogus" in usage.stderr
    assert "Usage: homelab validate" in usage.stderr


def test_on_exit_objects_are_frozen_and_atexit_handlers_still_run() -> None:
    probe = (
        "import atexit, gc, sys\n"
        "atexit.register(lambda: print('frozen', gc.get_freeze_count() > 0))\n"
        "sys.argv = ['homelab', '--version']\n"
        "from homelab.cli import main\n"
        "main()\n"
    )
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    from homelab import __version__

    assert (run.returncode, run.stdout) == (0, f"homelab {__version__}\nfrozen True\n")


def test_render_and_plan_import_no_certificate_parser(example_config) -> None:  # type: ignore[no-untyped-def]
    # cryptography (~20 ms) is for reading certificates the edge holds; the example holds none yet
    modules = _imported("plan", "-c", str(example_config))
    assert "homelab.project" in modules
    assert "cryptography" not in modules
