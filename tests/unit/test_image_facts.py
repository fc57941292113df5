"""Every program the catalog makes a container run is one its image has (homelab/images/facts/)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from homelab.catalog import catalog_dir, entry
from homelab.config.loader import load
from homelab.images.facts import all_facts, argv_programs, healthcheck_programs, script_programs
from homelab.plan import build_plan
from homelab.render import render_all
from homelab.secrets import user_secret_values

CATALOG = sorted(p.stem for p in catalog_dir().glob("*.yaml"))


def _services():  # type: ignore[no-untyped-def]
    for name in CATALOG:
        for service_name, spec in entry(name).services.items():
            yield name, service_name, spec


def test_every_pinned_image_has_facts_with_sources() -> None:
    facts = all_facts()
    for name, service, spec in _services():
        assert spec.image in facts, f"{name}/{service}: no facts for {spec.image}"
    for image in facts.values():
        assert image.upstream and image.user.source
        assert all(p.source and p.path.startswith("/") for p in image.programs.values()), image.name
        assert "sh" in image.programs, f"{image.name}: `images check` runs /bin/sh in the image"


def test_every_program_a_healthcheck_entrypoint_or_command_calls_is_in_the_image() -> None:
    facts = all_facts()
    problems = []
    for name, service, spec in _services():
        image = facts[spec.image]
        called = argv_programs(spec.entrypoint or []) | argv_programs(spec.command or [])
        if spec.healthcheck:
            called |= healthcheck_programs(spec.healthcheck.test)
        problems += [
            f"{name}/{service}: {program} not in {image.name}" for program in called if not image.provides(program)
        ]
        problems += [
            f"{name}/{service}: calls {program}, absent: {why}"
            for program, why in image.absent.items()
            if program in called
        ]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("edge", ["traefik", "nginx"])
def test_programs_of_the_scripts_the_entrypoints_run_are_in_the_image(example_config: Path, edge: str) -> None:
    data = yaml.safe_load(example_config.read_text())
    data["edge"]["kind"] = edge
    if edge == "nginx":
        data["domain"]["acme"]["challenge"] = "http"  # certbot's webroot
    example_config.write_text(yaml.safe_dump(data, sort_keys=False))
    loaded = load(example_config)
    plan = build_plan(loaded)
    files = render_all(plan, user_secret_values(loaded)).files
    facts = all_facts()
    checked = 0
    for stack in plan.stacks.values():
        for service in stack.services.values():
            spec = entry(_entry_of(stack.name, service.name)).services[service.name]
            argv = [*(service.entrypoint or []), *(service.command or [])]
            if len(argv) == 2 and argv[0] in ("/bin/sh", "sh"):
                mount = next(m for m in service.mounts if m.target == argv[1])
                script = files[f"{stack.name}/{mount.source.removeprefix('./')}"].decode()
                missing = {p for p in script_programs(script) if not facts[spec.image].provides(p)}
                assert not missing, f"{service.name} runs {argv[1]}, which calls {missing}"
                checked += 1
    assert checked == (2 if edge == "nginx" else 0)  # nginx run.sh and certbot.sh


def _entry_of(stack: str, service: str) -> str:
    return next(n for n in CATALOG if entry(n).stack == stack and service in entry(n).services)


def test_file_secrets_go_only_to_variables_the_image_reads_from_files() -> None:
    facts = all_facts()
    for name, service, spec in _services():
        for variable in spec.secrets:
            base = variable.removesuffix("__FILE").removesuffix("_FILE")
            env = facts[spec.image].env.get(base)
            assert env is not None and env.file, (
                f"{name}/{service}: {variable}: the image does not read {base} from a file"
            )


@pytest.mark.parametrize(
    ("script", "expected"),
    [
        ("wget -q -O /dev/null http://x/ || exit 1", {"wget"}),
        ("A=1 B=2 exec foo --flag", {"foo"}),
        ("if [ -e x ]; then touch y; fi", {"touch"}),
        ('export P="$(cat /run/s)"; exec /init', {"cat", "/init"}),
        ("f() { g; }\nf && h | i", {"g", "h", "i"}),
        ("for x in a b c; do echo $x; done", set()),
        ("# a comment with curl\nnginx # and wget", {"nginx"}),
        ('"$CMD" arg', set()),
        ("while sleep 1; do :; done &\nexec nginx -g 'daemon off;'", {"sleep", "nginx"}),
        ("a \\\n  --x; b", {"a", "b"}),
        ('echo $((n + 1)) >"$D/f"; mv a b', {"mv"}),
        ('case "$1" in\n*";x=;"*) set -- y; grep z ;;\nb|c) awk 1 ;;\nesac', {"grep", "awk"}),
        ("while sleep 1; do [ -e x ] && continue; sed q; break; done", {"sleep", "sed"}),
    ],
)
def test_script_programs(script: str, expected: set[str]) -> None:
    assert script_programs(script) == expected


def test_healthcheck_and_argv_forms() -> None:
    assert healthcheck_programs(["CMD", "pg_isready", "-h", "127.0.0.1"]) == {"pg_isready"}
    assert healthcheck_programs(["CMD-SHELL", "pgrep -x a >/dev/null || pgrep -f b"]) == {"pgrep"}
    assert healthcheck_programs(["NONE"]) == set()
    assert argv_programs([]) == set()
    assert argv_programs(["/cron.sh"]) == {"/cron.sh"}
    assert argv_programs(["/bin/sh", "/etc/homelab/run.sh"]) == {"/bin/sh"}
