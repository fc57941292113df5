"""Upgrades on the real engine and real ZFS (zfs-fuse): v1 -> v2-bad is rolled back on its own with the
data byte-identical; v1 -> v2-good upgrades, and `rollback` by hand returns to v1 and v1's data.

Stand-ins (tiny busybox images built here): every version keeps a data file in /data, its dataset.
v1 writes `format-1`; both v2 rewrite it to `format-2` on start; v2-good's healthcheck then passes,
v2-bad's never does. The stack is built by hand (one service, one dataset) and goes through
apply.converge / apply.apply / homelab.upgrade.run as `homelab up` does, with the real drivers.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import standins
import yaml
from dockerlab import remove_homelab_resources

from homelab.engine import compose as apply
from homelab.engine import drift
from homelab.layout import COMPOSE_FILE
from homelab.ownership import write_owned
from homelab.plan_model import Dataset, Mount, Plan, Service, Stack
from homelab.runtime.docker import Docker
from homelab.runtime.zfs import ZfsCli
from homelab.upgrade import journal as upgrade_journal
from homelab.upgrade import run as upgrade
from homelab.upgrade import settle as upgrade_settle
from homelab.upgrade import undo as upgrade_undo
from tests.storage.zfs import make_pool, zfs_daemon  # noqa: F401 - fixtures

pytestmark = [pytest.mark.docker, pytest.mark.real]

STACK = "upgtest"
REPO = f"{standins.PREFIX}/upgrade"
ENV = {"APP_MODE": "planned"}
RUN = "trap 'exit 0' TERM\nwhile :; do sleep 1; done\n"
SCRIPTS = {
    "v1": (
        "[ -f /data/db ] || printf 'format-1\\nrecord a\\nrecord b\\n' > /data/db\n",
        "grep -q '^format-1' /data/db",
    ),
    "v2-good": ("sed -i 's/^format-1/format-2/' /data/db\necho migrated >> /data/db\n", "grep -q '^format-2' /data/db"),
    "v2-bad": ("sed -i 's/^format-1/format-2/' /data/db\necho migrated >> /data/db\n", "exit 1"),
}


@pytest.fixture(scope="module")
def versions(engine, zfs_daemon, tmp_path_factory) -> Iterator[dict[str, str]]:  # type: ignore[no-untyped-def]
    # both machine locks, always the engine's first (the one order, so two sessions never deadlock)
    work = tmp_path_factory.mktemp("upgrade-images")
    tags = {}
    for version, (start, health) in SCRIPTS.items():
        root = standins.Rootfs(work / f"{version}.tar")
        root.busybox()
        root.file("entry", data=f"#!/bin/sh\nset -e\n{start}{RUN}".encode())
        root.file("health", data=f"#!/bin/sh\n{health}\n".encode())
        tags[version] = root.import_as(f"{REPO}:{version}", 'ENTRYPOINT ["/entry"]')
    yield tags
    remove_homelab_resources()


@pytest.fixture
def box(engine, versions, make_pool, tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("HOMELAB_COMPOSE", engine["HOMELAB_COMPOSE"])
    monkeypatch.setenv("HOMELAB_BACKUP_STATE", str(tmp_path / "backup-state"))  # no backup runs here
    pool = make_pool("128M")
    dataset = f"{pool}/app"
    subprocess.run(["zfs", "create", dataset], check=True, capture_output=True)
    mountpoint = subprocess.run(
        ["zfs", "get", "-H", "-o", "value", "mountpoint", dataset], capture_output=True, text=True, check=True
    ).stdout.strip()
    yield Box(tmp_path / "stacks", dataset, Path(mountpoint), versions)
    remove_homelab_resources()


class Box:
    def __init__(self, out: Path, dataset: str, data: Path, versions: dict[str, str]) -> None:
        self.out, self.dataset, self.data, self.versions = out, dataset, data, versions
        self.docker, self.zfs = Docker(), ZfsCli()
        self.said: list[str] = []
        self.repaired: list[drift.Drift] = []
        self.start_periods: dict[str, str] = {}  # version -> its healthcheck's start_period
        self.restarted: set[str] = set()  # versions run with the catalog's `restart: unless-stopped`

    def services(self, version: str) -> tuple[dict[str, Service], list[Dataset]]:
        """The stack as the plan has it: its services and the datasets they mount."""
        mounts = [Mount(str(self.data), "/data", False)]
        service = Service(name="app", image=self.versions[version], environment=dict(ENV), mounts=mounts)
        return {"app": service}, [Dataset(STACK, "data", self.dataset, str(self.data), {}, 0, 0, False, "test data")]

    def compose(self, version: str) -> dict:  # type: ignore[type-arg]
        """The stack's compose.yaml for `version`."""
        health = {"test": ["CMD", "/health"], "interval": "1s", "timeout": "5s", "retries": 3}
        if version in self.start_periods:
            health["start_period"] = self.start_periods[version]
        app = {
            "image": self.versions[version],
            "environment": dict(ENV),
            "volumes": [f"{self.data}:/data"],
            "healthcheck": health,
        }
        if version in self.restarted:
            app["restart"] = "unless-stopped"
        return {"services": {"app": app}}

    def plan(self, version: str) -> Plan:
        services, datasets = self.services(version)
        return Plan(None, None, {STACK: Stack(STACK, services=services)}, [], [], datasets, {})  # type: ignore[arg-type]

    def render(self, version: str) -> tuple[Plan, apply.Convergence, dict[str, bytes]]:
        """What `homelab up` does before applying: read the upgrade journal first (finish or undo what a
        killed run left), keep the previous compose.yaml, write the new one, converge, mark drift repairs."""
        held = upgrade_settle.recover(self.out, self.docker, self.zfs, timeout=60, progress=self.said.append).error()
        if held is not None:  # the only stack: `up` leaves it as it is and fails
            raise held
        previous = upgrade.read_composes(self.out)
        (self.out / STACK).mkdir(parents=True, exist_ok=True)
        text = yaml.safe_dump(self.compose(version)).encode()
        changed = [] if previous.get(STACK) == text else [f"{STACK}/{COMPOSE_FILE}"]
        write_owned(self.out, {f"{STACK}/{COMPOSE_FILE}": text})
        plan = self.plan(version)
        convergence = apply.converge(
            plan, self.out, self.docker, [STACK], changed_files=changed, include_removed_stacks=False
        )
        self.repaired = drift.mark_repairs(convergence, drift.find_drift(convergence, plan, changed))
        return plan, convergence, previous

    def up(self, version: str, timeout: float = 60) -> None:
        """`homelab up` to `version`: render, then apply with the upgrade guard."""
        plan, convergence, previous = self.render(version)
        guard = upgrade.guard_for(
            convergence, plan, self.out, self.docker, previous, True, timeout, self.said.append, zfs=self.zfs
        )
        apply.apply(
            convergence, plan, self.docker, timeout=timeout, progress=self.said.append, zfs=self.zfs, guard=guard
        )

    def running(self, service: str = "app") -> tuple[str, str | None]:
        (container,) = [c for c in self.docker.containers([f"homelab-{STACK}"]) if c.service == service]
        return container.image, container.health


def test_a_bad_upgrade_rolls_back_to_v1_with_byte_identical_data(box: Box) -> None:
    box.up("v1")
    before = (box.data / "db").read_bytes()
    assert before.startswith(b"format-1")
    with pytest.raises(upgrade_journal.RolledBack) as caught:
        box.up("v2-bad")
    assert "rolled back" in str(caught.value)
    assert box.running() == (box.versions["v1"], "healthy")
    assert (box.data / "db").read_bytes() == before
    (record,) = upgrade_journal.list_records(box.out)
    assert record.state == "rolled-back" and record.snapshot
    assert (box.out / upgrade_journal.RECORDS_DIR / record.folder_name / "app.log").is_file()
    assert record.snapshot in box.zfs.snapshots(box.dataset)


def test_a_good_upgrade_stays_and_rollback_by_hand_returns_to_v1_and_its_data(box: Box) -> None:
    box.up("v1")
    before = (box.data / "db").read_bytes()
    box.up("v2-good")
    assert box.running() == (box.versions["v2-good"], "healthy")
    assert (box.data / "db").read_bytes().startswith(b"format-2")
    (record,) = upgrade_journal.list_records(box.out)
    assert record.state == "upgraded" and record.snapshot in box.zfs.snapshots(box.dataset)
    upgrade_undo.rollback(
        box.out, box.docker, box.zfs, STACK, timeout=60, progress=box.said.append, decide=lambda _loss: True
    )
    assert box.running() == (box.versions["v1"], "healthy")
    assert (box.data / "db").read_bytes() == before


def test_a_nearly_full_pool_is_refused_before_anything_is_touched(box: Box) -> None:
    box.up("v1")
    before = (box.data / "db").read_bytes()
    free = int(box.zfs.get(box.dataset, "available"))
    (box.data / "filler").write_bytes(os.urandom(free - (32 << 20)))  # leaves < 64 MiB (upgrade.MIN_FREE)
    subprocess.run(["sync"], check=True)
    with pytest.raises(upgrade_journal.UpgradeRefused) as caught:
        box.up("v2-good")
    assert f"dataset {box.dataset} has " in str(caught.value) and caught.value.exit_code == 5
    assert box.running() == (box.versions["v1"], "healthy")
    assert (box.data / "db").read_bytes() == before
    assert upgrade_journal.list_records(box.out) == [] and box.zfs.snapshots(box.dataset) == []


def test_a_container_recreated_by_hand_with_another_env_var_is_reported_and_repaired(box: Box) -> None:
    box.up("v1")
    (container,) = box.docker.containers([f"homelab-{STACK}"])
    inspect = json.loads(standins.docker("inspect", container.id).stdout)[0]
    labels = [arg for key, value in inspect["Config"]["Labels"].items() for arg in ("--label", f"{key}={value}")]
    standins.docker("rm", "-f", container.id)
    standins.docker(
        "run", "-d", "--name", container.name, *labels, "-e", "APP_MODE=by-hand", "-v", f"{box.data}:/data",
        "--health-cmd", "/health", "--health-interval", "1s", box.versions["v1"],
    )  # fmt: skip
    found = drift.status_drift(box.plan("v1"), box.out, box.docker)
    assert [(d.service, d.kind, d.differences) for d in found] == [("app", "changed", ("environment APP_MODE",))]
    box.up("v1")  # the next up: same config, the container repaired
    assert [d.service for d in box.repaired] == ["app"]
    (again,) = box.docker.containers([f"homelab-{STACK}"])
    assert "APP_MODE=planned" in again.env and again.health == "healthy"
    assert drift.status_drift(box.plan("v1"), box.out, box.docker) == []
    assert upgrade_journal.list_records(box.out) == []  # a repair is not an upgrade
