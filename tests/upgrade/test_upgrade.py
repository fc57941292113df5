"""Upgrades against the recording Docker and ZFS fakes: snapshot before an image changes, automatic
rollback when the new version is not healthy, `rollback` by hand, retention, refusals."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import pytest
import yaml

from homelab.engine import compose as apply
from homelab.layout import project_name
from homelab.upgrade import journal as upgrade_journal
from homelab.upgrade import run as upgrade
from homelab.upgrade import undo as upgrade_undo
from tests.backup.fast import ContentZfs
from tests.fakes.docker import FakeDocker, container
from tests.fakes.zfs import FakeZfs
from tests.unit.conftest import Deployment

DEV = project_name("dev")
OLD = "gitea/gitea:1.0.0-old"


class ImageDocker(FakeDocker):
    """FakeDocker whose containers carry the image compose.yaml names, unhealthy when it is in `bad`,
    and which notes the upgrade snapshots that existed when each `up` ran."""

    def __init__(self, zfs: FakeZfs, *running) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*running)
        self.zfs = zfs
        self.bad: set[str] = set()
        self.snapshots_at_up: list[list[str]] = []

    def up(
        self,
        project: str,
        stack_dir: Path,
        *,
        timeout: float,
        force_recreate: Iterable[str] = (),
        remove_orphans: bool = True,
    ) -> None:
        self.snapshots_at_up.append([n for n in self.zfs.local if "@homelab-upgrade-" in n])
        super().up(project, stack_dir, timeout=timeout, force_recreate=force_recreate, remove_orphans=remove_orphans)
        images = {
            s: v["image"] for s, v in yaml.safe_load((stack_dir / "compose.yaml").read_text())["services"].items()
        }
        self.running = [
            c
            if c.project != project
            else container(
                project,
                c.service,
                config_hash=c.config_hash,
                image=images[c.service],
                health="unhealthy" if images[c.service] in self.bad else "healthy",
            )
            for c in self.running
        ]


def _setup(deployment: Deployment) -> tuple[ImageDocker, ContentZfs, list[str]]:
    """dev runs with gitea on an old image; every dev dataset is on the fake pool."""
    zfs = ContentZfs(deployment.mount.parent / "snapshots")  # a rollback reads the snapshot's files
    zfs.mount_root = deployment.mount.parent
    zfs.add_pool("tank", deployment.mount.parent / "pool")
    zfs.create("tank/homelab", {"mountpoint": str(deployment.mount)})
    datasets = list(upgrade.stack_datasets(deployment.plan, deployment.plan.stacks["dev"]))
    for name in sorted(datasets, key=len):
        for i in range(2, name.count("/") + 2):
            part = "/".join(name.split("/")[:i])
            if part not in zfs.local:
                zfs.create(part)
    for dataset in deployment.plan.datasets:  # as `storage apply` leaves a mountpoint (up refuses another owner)
        if Path(dataset.path).is_dir():
            os.chown(dataset.path, dataset.uid, dataset.gid)
    running = [container(DEV, "gitea", image=OLD), container(DEV, "jenkins"), container(DEV, "rstudio")]
    for c in running[1:]:
        object.__setattr__(c, "image", deployment.plan.stacks["dev"].services[c.service].image)
    docker = ImageDocker(zfs, *running)
    docker.hashes[DEV] = {c.service: c.config_hash or "" for c in running} | {"gitea": "hash-gitea-new"}
    return docker, zfs, datasets


def _read_back(zfs: FakeZfs) -> list[str]:
    """The snapshots a rollback read through clones (it puts files back; no `zfs rollback` ever runs)."""
    assert not [c for c in zfs.changes() if c[0] == "rollback"]
    return sorted({c[1] for c in zfs.changes() if c[0] == "clone"})


def _previous_compose(deployment: Deployment) -> bytes:
    """The dev compose.yaml as it was before this render: gitea on the old image."""
    data = yaml.safe_load((deployment.out / "dev" / "compose.yaml").read_text())
    data["services"]["gitea"]["image"] = OLD
    return yaml.safe_dump(data).encode()


def _up(
    deployment: Deployment, docker: ImageDocker, zfs: FakeZfs, *, snapshot: bool = True, said: list[str] | None = None
):  # type: ignore[no-untyped-def]
    previous = {"dev": _previous_compose(deployment)}
    convergence = apply.converge(deployment.plan, deployment.out, docker, ["dev"], include_removed_stacks=False)
    progress = (said if said is not None else []).append
    guard = upgrade.guard_for(
        convergence, deployment.plan, deployment.out, docker, previous, snapshot, 30, progress, zfs=zfs
    )
    return apply.apply(convergence, deployment.plan, docker, timeout=30, zfs=zfs, guard=guard, progress=progress)


def test_the_stack_datasets_are_snapshotted_before_compose_touches_it(deployment: Deployment) -> None:
    docker, zfs, datasets = _setup(deployment)
    assert datasets, "the dev stack mounts datasets"
    said: list[str] = []
    _up(deployment, docker, zfs, said=said)
    snap = [c[1] for c in zfs.changes() if c[0] == "snapshot"]
    assert sorted(s.partition("@")[0] for s in snap) == sorted(datasets)
    assert len({s.partition("@")[2] for s in snap}) == 1 and snap[0].split("@")[1].startswith("homelab-upgrade-dev-")
    assert sorted(docker.snapshots_at_up[0]) == sorted(snap)  # taken before the first `up`
    assert any(f"gitea {OLD} -> " in line for line in said), said
    (record,) = upgrade_journal.list_records(deployment.out)
    assert record.state == "upgraded" and record.changes[0].old == OLD
    assert not [c for c in zfs.changes() if c[0] == "rollback"]


def test_an_unchanged_image_takes_no_snapshot(deployment: Deployment) -> None:
    docker, zfs, _ = _setup(deployment)
    _up(deployment, docker, zfs)
    zfs.calls.clear()
    docker.hashes[DEV]["jenkins"] = "hash-jenkins-new"  # a config change, same image
    _up(deployment, docker, zfs)
    assert not [c for c in zfs.changes() if c[0] == "snapshot"]
    assert len(upgrade_journal.list_records(deployment.out)) == 1


def test_an_unhealthy_upgrade_is_rolled_back_data_and_compose(deployment: Deployment) -> None:
    docker, zfs, datasets = _setup(deployment)
    new_image = deployment.plan.stacks["dev"].services["gitea"].image
    docker.bad.add(new_image)
    new_compose = (deployment.out / "dev" / "compose.yaml").read_bytes()
    with pytest.raises(upgrade_journal.RolledBack) as caught:
        _up(deployment, docker, zfs)
    message = str(caught.value)
    assert "rolled back" in message and "gitea" in message
    snapshot = next(c[1] for c in zfs.changes() if c[0] == "snapshot").split("@")[1]
    assert _read_back(zfs) == sorted(f"{d}@{snapshot}" for d in datasets)
    assert ("down", DEV, deployment.out / "dev") in docker.calls
    assert (deployment.out / "dev" / "compose.yaml").read_bytes() == _previous_compose(deployment) != new_compose
    gitea = next(c for c in docker.running if c.service == "gitea")
    assert gitea.image == OLD and gitea.health == "healthy"
    (record,) = upgrade_journal.list_records(deployment.out)
    assert record.state == "rolled-back"
    assert (deployment.out / upgrade_journal.RECORDS_DIR / record.folder_name / "gitea.log").is_file()
    # the next `up` may write compose.yaml again: the rolled-back file is still recorded as ours
    from homelab.ownership import is_ours

    assert is_ours(deployment.out, "dev/compose.yaml")


def test_rollback_by_hand_returns_to_the_previous_version_while_the_snapshot_exists(deployment: Deployment) -> None:
    docker, zfs, datasets = _setup(deployment)
    with pytest.raises(upgrade_journal.UpgradeRefused, match="no upgrade to roll back"):
        upgrade_undo.rollback(deployment.out, docker, zfs, "dev", timeout=30, progress=lambda _m: None)
    _up(deployment, docker, zfs)
    record = upgrade_undo.rollback(deployment.out, docker, zfs, "dev", timeout=30, progress=lambda _m: None)
    assert record.state == "rolled-back"
    assert next(c for c in docker.running if c.service == "gitea").image == OLD
    assert _read_back(zfs) == sorted(f"{d}@{record.snapshot}" for d in datasets)
    with pytest.raises(upgrade_journal.UpgradeRefused):  # nothing upgraded is left to undo
        upgrade_undo.rollback(deployment.out, docker, zfs, "dev", timeout=30, progress=lambda _m: None)


def test_a_vanished_snapshot_is_refused_before_anything_stops(deployment: Deployment) -> None:
    docker, zfs, datasets = _setup(deployment)
    _up(deployment, docker, zfs)
    (record,) = upgrade_journal.list_records(deployment.out)
    del zfs.local[f"{datasets[0]}@{record.snapshot}"]
    docker.calls.clear()
    with pytest.raises(upgrade_journal.UpgradeRefused, match="is gone"):
        upgrade_undo.rollback(deployment.out, docker, zfs, "dev", timeout=30, progress=lambda _m: None)
    assert docker.changes() == []


def test_retention_keeps_the_three_newest_upgrade_snapshots(deployment: Deployment, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    docker, zfs, datasets = _setup(deployment)
    stamps = iter(f"2026010{i}T000000Z" for i in range(1, 10))
    strftime = upgrade.time.strftime
    monkeypatch.setattr(  # the upgrades' stamps (datetime's strftime goes through it too)
        upgrade.time, "strftime", lambda fmt, *a: next(stamps) if fmt == "%Y%m%dT%H%M%SZ" else strftime(fmt, *a)
    )
    for _ in range(5):
        _up(deployment, docker, zfs)
        for i, c in enumerate(docker.running):  # back to the old image, so the next up upgrades again
            if c.service == "gitea":
                docker.running[i] = container(DEV, "gitea", image=OLD, config_hash="old")
    left = sorted(n.split("@")[1] for n in zfs.local if n.startswith(datasets[0] + "@"))
    assert left == [f"homelab-upgrade-dev-2026010{i}T000000Z" for i in (3, 4, 5)]
    records = upgrade_journal.list_records(deployment.out)
    assert [r.snapshot is None for r in records] == [True, True, False, False, False]


def test_a_dataset_not_on_zfs_or_too_full_is_refused_before_anything_changes(deployment: Deployment) -> None:
    docker, zfs, datasets = _setup(deployment)
    zfs.local[datasets[0]]["available"] = str(10 << 20)
    zfs.local[datasets[0]]["referenced"] = str(5 << 20)
    del zfs.local[datasets[-1]]
    zfs.calls.clear()
    with pytest.raises(upgrade_journal.UpgradeRefused) as caught:
        _up(deployment, docker, zfs)
    message = str(caught.value)
    assert f"dataset {datasets[0]} has 10 MiB free" in message
    assert f"dataset {datasets[-1]} is not on ZFS" in message
    assert "--no-snapshot" in message and caught.value.exit_code == 5
    assert docker.changes() == [] and zfs.changes() == []


def test_no_snapshot_upgrades_without_a_way_back(deployment: Deployment) -> None:
    docker, zfs, datasets = _setup(deployment)
    del zfs.local[datasets[-1]]
    _up(deployment, docker, zfs, snapshot=False)
    assert not [c for c in zfs.changes() if c[0] == "snapshot"]
    with pytest.raises(upgrade_journal.UpgradeRefused, match="no snapshot"):
        upgrade_undo.rollback(deployment.out, docker, zfs, "dev", timeout=30, progress=lambda _m: None)


def test_backup_retention_never_counts_an_upgrade_snapshot_as_its_own() -> None:
    """The backup prune destroys only names it parses as its own: upgrade snapshots are left to upgrade's
    retention, so they stay while they are the way back."""
    from homelab.backup.retention import snapshot_time

    assert snapshot_time("homelab-20260101T000000Z") is not None  # the backup's own shape
    assert snapshot_time(f"{upgrade.SNAPSHOT_PREFIX}dev-20260101T000000Z") is None


def test_a_failed_upgrade_after_an_interrupted_up_returns_to_the_running_images(deployment: Deployment) -> None:
    """An earlier `up` rendered v2 then stopped (refused, killed): compose.yaml on disk already names the
    new image, so the rollback puts the images that ran back into it."""
    docker, zfs, _ = _setup(deployment)
    docker.bad.add(deployment.plan.stacks["dev"].services["gitea"].image)
    already_new = {"dev": (deployment.out / "dev" / "compose.yaml").read_bytes()}
    convergence = apply.converge(deployment.plan, deployment.out, docker, ["dev"], include_removed_stacks=False)
    guard = upgrade.guard_for(
        convergence, deployment.plan, deployment.out, docker, already_new, True, 30, lambda _m: None, zfs=zfs
    )
    with pytest.raises(upgrade_journal.RolledBack):
        apply.apply(convergence, deployment.plan, docker, timeout=30, zfs=zfs, guard=guard)
    gitea = next(c for c in docker.running if c.service == "gitea")
    assert gitea.image == OLD and gitea.health == "healthy"
    on_disk = yaml.safe_load((deployment.out / "dev" / "compose.yaml").read_text())
    assert on_disk["services"]["gitea"]["image"] == OLD
    assert on_disk["services"]["jenkins"] == yaml.safe_load(already_new["dev"])["services"]["jenkins"]
