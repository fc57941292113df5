"""The RAM budget arithmetic, on the example (16 GB ecc-mini-itx) and on boxes too small for it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from homelab import memory
from homelab.cli import app
from homelab.cli import commands as _commands  # noqa: F401 - registers the commands
from homelab.config.loader import load
from homelab.doctor import memory_checks
from homelab.errors import ConfigError
from homelab.images.budget import GIB, MIB, budget
from homelab.memory import host_budget, plan_arc, planning_budget
from homelab.plan import build_plan
from homelab.runtime.machine import Machine
from tests.fakes.machine import FakeMachine

runner = CliRunner()


def test_the_examples_budget(example_config: Path) -> None:
    plan = build_plan(load(example_config))
    b = budget(plan, 16 * GIB)
    # the catalog's reservations for the 14 services (docs/resources.md): 4416 MiB; limits 20352 MiB
    assert len(b.lines) == 14
    assert b.reserved == 4416 * MIB
    assert b.limits == 20352 * MIB
    assert b.for_apps == 15 * GIB
    assert b.arc_room == 15 * GIB - 4416 * MIB
    assert b.problems() == []
    assert round(b.overcommit, 2) == 1.32 and b.warnings() == []


def test_reservations_beyond_ram_are_refused_naming_what_to_lower(example_config: Path) -> None:
    b = budget(build_plan(load(example_config)), 4 * GIB)
    assert b.arc_room == 0
    assert b.problems() == [
        "reservations 4.3 GiB exceed the 3.0 GiB left for apps (4.0 GiB RAM - 1.0 GiB for the OS): lower "
        "apps.<app>.resources.reservation (largest: media/plex 1.0 GiB, dev/jenkins 1.0 GiB, "
        "cloud/nextcloud 0.5 GiB) or disable an app"
    ]


def test_limits_overcommitting_past_the_factor_warn(example_config: Path) -> None:
    b = budget(build_plan(load(example_config)), 8 * GIB)
    assert b.problems() == []
    assert b.warnings() and "2.8x the 7.0 GiB left for apps" in b.warnings()[0]  # 20352 MiB / 7168 MiB


def test_reservations_beyond_the_profiles_ram_are_refused_with_file_line(example_config: Path) -> None:
    # jenkins reserving 12g: 4416 - 1024 + 12288 = 15680 MiB of reservations, over the 15 GiB left for apps
    text = example_config.read_text()
    text = text.replace("  jenkins:\n", "  jenkins:\n    resources: {memory: 14g, reservation: 12g}\n", 1)
    example_config.write_text(text)
    line = text.splitlines().index("    resources: {memory: 14g, reservation: 12g}") + 1
    with pytest.raises(ConfigError) as caught:
        build_plan(load(example_config))
    assert caught.value.problems == [
        f"{example_config}:{line}: apps.jenkins.resources: reservations 15.3 GiB exceed the 15.0 GiB left for apps "
        "(16.0 GiB RAM - 1.0 GiB for the OS): lower apps.<app>.resources.reservation (largest: dev/jenkins "
        "12.0 GiB, media/plex 1.0 GiB, cloud/nextcloud 0.5 GiB) or disable an app"
    ]


def test_plan_shows_the_budget(example_config: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory, "Machine", lambda: FakeMachine("laptop", 4 * GIB))  # not the server
    out = example_config.parent / "stacks"
    text = runner.invoke(app, ["plan", "-c", str(example_config), "--out", str(out)])
    assert text.exit_code == 0, text.output
    lines = text.stdout.splitlines()
    assert lines[:2] == [
        "memory budget (docs/resources.md):",
        "  RAM 16.0 GiB (profile ecc-mini-itx: this machine 'laptop' is not server.hostname 'nas') - 1.0 GiB for "
        "the OS = 15.0 GiB for apps; reservations 4.3 GiB; ZFS ARC cap 10.7 GiB; limits 19.9 GiB (1.32x, warning "
        "past 1.5x)",
    ]
    assert "    dev/jenkins              reserves  1024 MiB  limit  4096 MiB" in lines


def test_plan_on_the_server_uses_its_ram_and_fails_when_the_reservations_do_not_fit(
    example_config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the example's server is `nas`; this one has 4 GiB, the profile says 16: the config is valid, but
    # the 4.3 GiB of reservations do not fit this box (exit 1, like a failed doctor check)
    monkeypatch.setattr(memory, "Machine", lambda: FakeMachine("NAS", 4 * GIB))
    out = example_config.parent / "stacks"
    text = runner.invoke(app, ["plan", "-c", str(example_config), "--out", str(out)])
    assert text.exit_code == 1, text.output
    lines = text.stdout.splitlines()
    assert lines[1].startswith("  RAM 4.0 GiB (host: this machine is server.hostname 'nas', MemTotal in /proc/meminfo)")
    fails = [line for line in lines if line.startswith("  fail: ")]
    assert len(fails) == 1 and fails[0].startswith(
        "  fail: reservations 4.3 GiB exceed the 3.0 GiB left for apps (4.0 GiB RAM - 1.0 GiB for the OS)"
    )
    document = json.loads(runner.invoke(app, ["plan", "--json", "-c", str(example_config), "--out", str(out)]).stdout)
    assert document["ok"] is False and document["budget"]["ram_source"] == "host"
    assert document["budget"]["ram"] == 4 * GIB and document["budget"]["problems"]


def test_planning_reads_the_ram_of_this_machine_only_when_it_is_the_server(example_config: Path) -> None:
    plan = build_plan(load(example_config))
    server = FakeMachine("nas", 32 * GIB)
    box = planning_budget(plan, server)
    assert (box.ram, box.ram_source, server.calls) == (32 * GIB, "host", ["hostname", "mem_total"])
    laptop = FakeMachine("laptop", 32 * GIB)
    box = planning_budget(plan, laptop)
    assert (box.ram, box.ram_source, laptop.calls) == (16 * GIB, "profile", ["hostname"])  # never read
    unreadable = FakeMachine("nas", None)
    box = planning_budget(plan, unreadable)
    assert (box.ram, box.ram_source) == (16 * GIB, "profile")
    assert box.ram_why == "profile ecc-mini-itx: /proc/meminfo unreadable on 'nas'"


def test_memtotal_is_read_from_meminfo_in_kib(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemFree:          123456 kB\nMemTotal:        3999996 kB\n")
    assert Machine(meminfo).mem_total() == 3999996 * 1024
    meminfo.write_text("MemFree:          123456 kB\n")
    assert Machine(meminfo).mem_total() is None
    assert Machine(tmp_path / "absent").mem_total() is None


@pytest.mark.real
def test_memtotal_of_this_machine_is_what_the_kernel_reports_by_sysconf() -> None:
    """The one real read of /proc/meminfo: MemTotal is the kernel's totalram, which sysconf reports in
    pages (glibc's _SC_PHYS_PAGES is sysinfo's totalram)."""
    assert Machine().mem_total() == os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def test_plan_json_has_the_budget_in_bytes(example_config: Path) -> None:
    out = example_config.parent / "stacks"
    document = json.loads(runner.invoke(app, ["plan", "--json", "-c", str(example_config), "--out", str(out)]).stdout)
    b = document["budget"]
    assert (b["ram"], b["reserved"], b["limits"], b["zfs_arc_max"]) == (16 * GIB, 4416 * MIB, 20352 * MIB, 10944 * MIB)
    assert {"service": "media/plex", "reservation": GIB, "limit": 4 * GIB} in b["services"]
    assert b["problems"] == [] and b["warnings"] == [] and b["overcommit"] == 1.325
    assert not out.exists()  # plan writes nothing


def test_doctor_checks_the_budget_on_this_machines_ram(example_config: Path, tmp_path: Path) -> None:
    plan = build_plan(load(example_config))
    box = host_budget(plan, FakeMachine(mem_total=3999996 * 1024))
    assert box.ram_source == "host" and box.problems()
    checks = list(memory_checks(box, lambda arc_max: plan_arc(arc_max, tmp_path)))
    assert [(c.level, c.name) for c in checks] == [("fail", "memory"), ("warn", "memory"), ("ok", "zfs arc")]
    assert checks[0].detail.startswith("reservations 4.3 GiB exceed the 2.8 GiB left for apps (3.8 GiB RAM")
    assert "under 64 MiB for the ARC" in checks[2].detail
    assert host_budget(plan, FakeMachine(mem_total=None)).ram_source == "profile"
