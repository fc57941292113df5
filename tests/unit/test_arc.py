"""The ZFS ARC cap from the budget: persisted in /etc/modprobe.d (read back by the real modprobe), set live
through /sys/module/zfs/parameters, skipped where there is no OpenZFS module (zfs-fuse). A fake root in
tmp_path stands for / (the files are the kernel's interface: one decimal number, one modprobe line)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from homelab.memory import MODPROBE_FILE, PARAMETER, ArcPlan, apply_arc, plan_arc

ARC = 10944 << 20  # the example's cap on the 16 GB profile (docs/resources.md)


def _module(root: Path, value: str = "0") -> Path:
    parameter = root / PARAMETER
    parameter.parent.mkdir(parents=True)
    parameter.write_text(f"{value}\n")
    return parameter


def test_the_cap_is_persisted_for_modprobe_and_set_live(tmp_path: Path, require_program) -> None:  # type: ignore[no-untyped-def]
    parameter = _module(tmp_path)
    arc = plan_arc(ARC, tmp_path)
    assert arc.changes and arc.live == 0 and "OpenZFS's default" in arc.describe()
    assert apply_arc(arc, tmp_path) == [
        f"wrote  /{MODPROBE_FILE}: zfs_arc_max={ARC} from the next module load",
        f"set    zfs_arc_max={ARC} live",
    ]
    assert parameter.read_text() == f"{ARC}\n"
    shown = subprocess.run(
        [require_program("modprobe"), "-C", str(tmp_path / MODPROBE_FILE), "--showconfig"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert [line for line in shown.splitlines() if line.startswith("options zfs ")] == [
        f"options zfs zfs_arc_max={ARC}"
    ]
    again = plan_arc(ARC, tmp_path)
    assert not again.changes and apply_arc(again, tmp_path) == [again.describe()]
    assert again.describe().startswith("ok ")


def test_a_new_budget_rewrites_the_cap(tmp_path: Path) -> None:
    _module(tmp_path)
    apply_arc(plan_arc(ARC, tmp_path), tmp_path)
    smaller = plan_arc(4 << 30, tmp_path)
    assert smaller.changes and not smaller.persisted and smaller.live == ARC
    apply_arc(smaller, tmp_path)
    assert (tmp_path / MODPROBE_FILE).read_text().endswith(f"zfs_arc_max={4 << 30}\n")


def test_without_the_openzfs_module_nothing_is_written(tmp_path: Path) -> None:
    arc = plan_arc(ARC, tmp_path)  # zfs-fuse, or no ZFS: no /sys/module/zfs
    assert arc.skip and "no OpenZFS kernel module" in arc.describe() and not arc.changes
    assert apply_arc(arc, tmp_path) == [arc.describe()]
    assert not (tmp_path / "etc").exists()


def test_a_cap_openzfs_would_ignore_is_not_set(tmp_path: Path) -> None:
    _module(tmp_path)
    arc = plan_arc(32 << 20, tmp_path)
    assert arc.skip and "under 64 MiB" in arc.skip and apply_arc(arc, tmp_path) == [arc.describe()]


def test_a_live_value_the_kernel_refuses_applies_at_the_next_boot(tmp_path: Path) -> None:
    (tmp_path / PARAMETER).mkdir(parents=True)  # writing it fails, as on a read-only /sys
    lines = apply_arc(ArcPlan(ARC, live=0, persisted=False, skip=None), tmp_path)
    assert lines[0].startswith("wrote ") and (tmp_path / MODPROBE_FILE).is_file()
    assert lines[1] == "warn   zfs_arc_max not set live (Is a directory): it applies from the next boot"
