"""This machine's memory: its RAM (MemTotal, homelab.runtime.machine), the memory budget on it
(homelab.images.budget, the pure arithmetic), and the ZFS ARC cap `zfs_arc_max` the budget leaves, set
by the storage step.

Unless capped, OpenZFS on Linux lets the ARC grow to half the RAM or more (newer releases to most of it),
and it gives memory back only under pressure, after the apps already feel it. `homelab storage apply`
persists the cap as a module option in /etc/modprobe.d (read when the module loads, so at every boot) and
sets it live through /sys/module/zfs/parameters, which the module accepts at run time. OpenZFS ignores a
value under 64 MiB or not below the RAM (module/zfs/arc.c, arc_tuning_update: "Valid range: 64M - <all
physical memory>"), so such a cap is not written. zfs-fuse has no kernel module and no such parameter:
skipped with a message. When the root filesystem is on ZFS the module loads from the initramfs:
`update-initramfs -u` then makes the file count at boot (docs/resources.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from homelab.images.budget import Budget, budget
from homelab.plan_model import Plan
from homelab.runtime.machine import Machine, MachineReader

HOST_ROOT = Path("/")  # where /etc and /sys are (tests point it at a folder of their own)
MODPROBE_FILE = Path("etc/modprobe.d/homelab-zfs-arc.conf")  # under the host's root
PARAMETER = Path("sys/module/zfs/parameters/zfs_arc_max")
MIN_ARC_MAX = 64 << 20  # OpenZFS ignores a smaller zfs_arc_max


def host_budget(plan: Plan, machine: MachineReader | None = None) -> Budget:
    """The budget on this machine (doctor, storage apply run on the box itself): its own RAM, the
    profile's where /proc/meminfo is unreadable."""
    ram = (machine or Machine()).mem_total()
    if ram is None:
        return budget(plan, ram_why=f"profile {plan.profile.name}: /proc/meminfo unreadable")
    return budget(plan, ram, "host", "host: MemTotal in /proc/meminfo")


def planning_budget(plan: Plan, machine: MachineReader | None = None) -> Budget:
    """The budget `plan` shows: this machine's RAM when it is the server (its host name is
    `server.hostname`: planning on the box before `up`), the hardware profile's otherwise (planning
    for the box from another machine, e.g. a laptop or CI)."""
    machine = machine or Machine()
    here, server = machine.hostname(), plan.config.server.hostname
    if here.lower() != server.lower():
        why = f"profile {plan.profile.name}: this machine {here!r} is not server.hostname {server!r}"
        return budget(plan, ram_why=why)
    ram = machine.mem_total()
    if ram is None:
        return budget(plan, ram_why=f"profile {plan.profile.name}: /proc/meminfo unreadable on {here!r}")
    return budget(plan, ram, "host", f"host: this machine is server.hostname {server!r}, MemTotal in /proc/meminfo")


def modprobe_conf(arc_max: int) -> str:
    return (
        "# Written by `homelab storage apply`: the ZFS ARC cap from the memory budget (docs/resources.md).\n"
        f"options zfs zfs_arc_max={arc_max}\n"
    )


@dataclass(frozen=True)
class ArcPlan:
    arc_max: int
    live: int | None  # the module's value now (0: OpenZFS's default); None: no ZFS kernel module
    persisted: bool  # the modprobe file already says so
    skip: str | None  # why nothing will be done

    @property
    def changes(self) -> bool:
        return self.skip is None and (self.live != self.arc_max or not self.persisted)

    def describe(self) -> str:
        cap = f"zfs_arc_max {self.arc_max} ({self.arc_max >> 20} MiB)"
        if self.skip:
            return f"skip   {cap}: {self.skip}"
        if not self.changes:
            return f"ok     {cap}: set live and in /{MODPROBE_FILE}"
        now = "OpenZFS's default" if self.live == 0 else f"{self.live}"
        return f"set    {cap}: live now {now}; persisted in /{MODPROBE_FILE}"


def plan_arc(arc_max: int, root: Path | None = None) -> ArcPlan:
    root = root or HOST_ROOT
    conf = root / MODPROBE_FILE
    persisted = conf.is_file() and conf.read_text(encoding="utf-8") == modprobe_conf(arc_max)
    parameter = root / PARAMETER
    live = int(parameter.read_text(encoding="ascii").strip()) if parameter.is_file() else None
    if arc_max < MIN_ARC_MAX:
        skip = "the reservations leave under 64 MiB for the ARC, which OpenZFS would ignore; lower them"
    elif live is None:
        skip = "no OpenZFS kernel module loaded (zfs-fuse or no ZFS): there is no ARC parameter to set"
    else:
        skip = None
    return ArcPlan(arc_max, live, persisted, skip)


def apply_arc(arc: ArcPlan, root: Path | None = None) -> list[str]:
    """Persist the cap, then set it live; what was done, one line each. A live value the kernel refuses
    (e.g. not writable in a container) leaves the persisted one for the next boot."""
    root = root or HOST_ROOT
    if not arc.changes:
        return [arc.describe()]
    done = []
    if not arc.persisted:
        conf = root / MODPROBE_FILE
        conf.parent.mkdir(parents=True, exist_ok=True)
        conf.write_text(modprobe_conf(arc.arc_max), encoding="utf-8")
        done.append(f"wrote  /{MODPROBE_FILE}: zfs_arc_max={arc.arc_max} from the next module load")
    if arc.live != arc.arc_max:
        try:
            (root / PARAMETER).write_text(f"{arc.arc_max}\n", encoding="ascii")
            done.append(f"set    zfs_arc_max={arc.arc_max} live")
        except OSError as exc:
            done.append(f"warn   zfs_arc_max not set live ({exc.strerror}): it applies from the next boot")
    return done
