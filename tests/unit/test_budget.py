"""The RAM budget arithmetic, on the example (16 GB ecc-mini-itx) and on boxes too small for it."""

from __future__ import annotations

from pathlib import Path

from homelab.config.loader import load
from homelab.images.budget import GIB, budget
from homelab.plan import build_plan

MIB = 1 << 20


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
