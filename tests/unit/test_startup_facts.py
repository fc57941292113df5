"""The start-up operations of the image facts (homelab/images/facts/*.yaml `startup`, issue 27): each one cited
upstream, and each one performed by the faithful stand-in the docker tests build from the facts.

The stand-in's own code does it: standins.startup_script (the /.standin/startup baked into each stand-in)
run by images/faithful/ops.sh under a real busybox, its paths under a scratch root, as the test's user (the
operations of the uid a root entrypoint drops to too: the stand-in has no account to drop to here)."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest
import standins
from pydantic import ValidationError

from homelab.images.facts import ImageFacts, StartupOp, all_facts
from tests.conftest import find_program

OPS = standins.HERE / "faithful" / "ops.sh"
WITH_STARTUP = sorted(f.name for f in all_facts().values() if f.startup)
ROOT = os.geteuid() == 0  # chown, and owners checked, only as root


def _facts(name: str) -> ImageFacts:
    return next(f for f in all_facts().values() if f.name == name)


def _shipped(facts: ImageFacts, root: Path) -> None:
    """What the image ships or the service mounts for each operation: the folder a file is written in, the
    folder read, chmodded or chowned (the stand-in image ships those of standins.shipped_folders)."""
    for step in facts.startup:
        if step.do != "mkdir":
            folder = Path(step.path).parent if step.do == "write" else Path(step.path)
            (root / str(folder).lstrip("/")).mkdir(parents=True, exist_ok=True)


def _run(facts: ImageFacts, script: str, root: Path) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    busybox = find_program("busybox")
    assert busybox, "busybox (scripts/apt) runs the stand-ins"
    trace = root.parent / "trace"
    trace.write_text("")
    (root.parent / "startup").write_text(script)
    env = {"B": busybox, "name": facts.name, "STANDIN_ROOT": str(root), "STANDIN_TRACE": str(trace), "PATH": ""}
    proc = subprocess.run(
        [busybox, "sh", "-c", f". {OPS}; . {root.parent / 'startup'}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return proc, trace.read_text().splitlines()


def not_performed(facts: ImageFacts, script: str, root: Path) -> list[str]:
    """The facts' start-up operations the stand-in's script did not perform on a first start in an empty
    `root` (each one: done, in order, with its effect on the folder), as 'do path' lines."""
    _shipped(facts, root)
    proc, done = _run(facts, script, root)
    missing, seen, position = [], set(), 0
    for step in facts.startup:
        line = f"{step.do} {step.path}"
        target = root / step.path.lstrip("/")
        if step.unless and step.unless in seen:
            continue  # an earlier operation made the path that skips this one (a first start)
        if line in done[position:]:
            position = done.index(line, position) + 1
        else:
            missing.append(line)
            continue
        if step.do in ("mkdir", "write"):
            seen.add(step.path)
        effect = {
            "mkdir": target.is_dir(),
            "write": target.is_file() and "stand-in" in target.read_text(),
            "chmod": target.exists() and f"{stat.S_IMODE(target.stat().st_mode):o}" == step.mode,
            "read": target.is_dir(),
        }.get(step.do, True)
        if step.owner and ROOT:
            uid, _, gid = step.owner.partition(":")
            effect = effect and target.stat().st_uid == int(uid) and (not gid or target.stat().st_gid == int(gid))
        if not effect:
            missing.append(line)
    assert proc.returncode == 0 or missing, proc.stderr
    return missing


@pytest.mark.parametrize("name", WITH_STARTUP)
def test_the_stand_in_performs_every_start_up_operation(name: str, tmp_path: Path) -> None:
    facts = _facts(name)
    assert not_performed(facts, standins.startup_script(facts), tmp_path / "root") == []


@pytest.mark.parametrize("name", WITH_STARTUP)
def test_a_stand_in_that_skips_one_operation_fails(name: str, tmp_path: Path) -> None:
    """Each operation in turn left out of the stand-in's script: the check names exactly that one."""
    facts = _facts(name)
    lines = standins.startup_script(facts).splitlines(keepends=True)
    for index, step in enumerate(facts.startup):
        skipped = "".join(lines[:index] + lines[index + 1 :])
        missing = not_performed(facts, skipped, tmp_path / f"root-{index}")
        assert f"{step.do} {step.path}" in missing, (index, step, missing)


def test_every_image_states_its_start_up_and_cites_each_operation() -> None:
    """`startup:` is required in every facts file ([] when no script runs before the app), and an operation
    without an upstream file:line is refused when the facts load."""
    assert len(all_facts()) == len(list(Path(standins.__file__).parents[2].glob("homelab/images/facts/*.yaml")))
    assert {"postgres", "redis", "nextcloud", "plex", "rstudio", "jenkins", "gitea", "grafana"} <= set(WITH_STARTUP)
    for source in ("", "docker-entrypoint.sh (the walk)"):
        with pytest.raises(ValidationError, match="file:line"):
            StartupOp(do="mkdir", path="/data", source=source)
    data = {"name": "x", "image": "x", "upstream": "x", "user": {"value": "0:0", "source": "x"}, "programs": {}}
    with pytest.raises(ValidationError, match="startup"):
        ImageFacts.model_validate(data)
