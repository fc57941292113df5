"""The upgrade journal on the recording fakes: written before each step (0600), and what the next `up`
does with a journal a killed `homelab` left at each step; the Postgres dump before the snapshot; the
refusal while a backup reads the data.

A kill is played by raising `Killed` (a BaseException nothing in homelab catches) right after the journal
entered a state, or from inside a step: what is on disk and in the fakes is then what a kill -9 leaves.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
import yaml

from homelab.engine import compose as apply
from homelab.errors import HomelabError
from homelab.layout import project_name
from homelab.upgrade import journal as upgrade_journal
from homelab.upgrade import run as upgrade
from homelab.upgrade import settle as upgrade_settle
from homelab.upgrade import undo as upgrade_undo
from tests.fakes.docker import container
from tests.fakes.zfs import FakeZfs
from tests.unit.conftest import Deployment
from tests.upgrade.test_upgrade import DEV, OLD, ImageDocker, _read_back, _setup, _up

CLOUD = project_name("cloud")
OLD_NEXTCLOUD = "nextcloud:29.0.0-apache"


class Killed(BaseException):
    """kill -9: nothing after it runs, no handler sees it."""


def _kill_at(monkeypatch: pytest.MonkeyPatch, state: str) -> list[str]:
    """Record every journal state entered; die right after `state` is saved."""
    seen: list[str] = []
    step = upgrade_journal.Record.step

    def dying(self: upgrade_journal.Record, out: Path, new: upgrade_journal.State) -> None:
        step(self, out, new)
        seen.append(new)
        if new == state:
            raise Killed

    monkeypatch.setattr(upgrade_journal.Record, "step", dying)
    return seen


def _recover(deployment: Deployment, docker: ImageDocker, zfs: FakeZfs, said: list[str] | None = None):  # type: ignore[no-untyped-def]
    return upgrade_settle.recover(
        deployment.out, docker, zfs, timeout=30, progress=(said if said is not None else []).append
    )


def _gitea(docker: ImageDocker):  # type: ignore[no-untyped-def]
    return next(c for c in docker.running if c.service == "gitea")


def test_the_journal_is_saved_0600_before_each_step(deployment: Deployment, monkeypatch: pytest.MonkeyPatch) -> None:
    docker, zfs, _ = _setup(deployment)
    seen = _kill_at(monkeypatch, "never")
    _up(deployment, docker, zfs)
    assert seen == ["snapshotting", "applying", "upgraded"]
    (record,) = upgrade_journal.list_records(deployment.out)
    folder = deployment.out / upgrade_journal.RECORDS_DIR / record.folder_name
    assert stat.S_IMODE((folder / "record.json").stat().st_mode) == 0o600
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert record.pid == os.getpid() and record.started == upgrade_journal.process_started(os.getpid()) != ""
    assert not list(folder.glob(".*.tmp"))

    docker.bad.add(deployment.plan.stacks["dev"].services["gitea"].image)
    docker.running = [c if c.service != "gitea" else container(DEV, "gitea", image=OLD) for c in docker.running]
    seen.clear()
    with pytest.raises(upgrade_journal.RolledBack):
        _up(deployment, docker, zfs)
    assert seen == ["snapshotting", "applying", "rolling-back", "rolled-back"]


def test_killed_while_snapshotting_the_next_up_removes_its_snapshots_and_starts_over(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    docker, zfs, datasets = _setup(deployment)
    assert len(datasets) > 1
    taken = zfs.snapshot

    def dies_on_the_second(dataset: str, name: str) -> str:
        if any("@homelab-upgrade-" in n for n in zfs.local):
            raise Killed
        return taken(dataset, name)

    monkeypatch.setattr(zfs, "snapshot", dies_on_the_second)
    with pytest.raises(Killed):
        _up(deployment, docker, zfs)
    monkeypatch.undo()
    assert len([n for n in zfs.local if "@homelab-upgrade-" in n]) == 1
    assert docker.changes() == [] and _gitea(docker).image == OLD
    said: list[str] = []
    (settled,) = _recover(deployment, docker, zfs, said).settled
    assert settled.state == "abandoned" and settled.snapshot is None
    assert [n for n in zfs.local if "@homelab-upgrade-" in n] == []
    assert any("interrupted while snapshotting" in line for line in said), said
    _up(deployment, docker, zfs)  # the `up` that recovered goes on: a fresh upgrade
    assert [r.state for r in upgrade_journal.list_records(deployment.out)] == ["abandoned", "upgraded"]
    assert _gitea(docker).image != OLD


def test_killed_after_the_snapshot_the_next_up_finishes_the_upgrade(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    docker, zfs, datasets = _setup(deployment)
    _kill_at(monkeypatch, "applying")
    with pytest.raises(Killed):
        _up(deployment, docker, zfs)
    monkeypatch.undo()
    assert docker.changes() == [] and _gitea(docker).image == OLD  # killed before compose ran
    said: list[str] = []
    (settled,) = _recover(deployment, docker, zfs, said).settled
    assert settled.state == "upgraded" and "finished by the next up" in settled.notes[-1]
    assert _gitea(docker).image == deployment.plan.stacks["dev"].services["gitea"].image
    assert all(settled.snapshot in zfs.snapshots(d) for d in datasets)  # kept, for `rollback`
    assert _recover(deployment, docker, zfs).settled == []  # settled once


def test_killed_after_the_snapshot_of_a_bad_version_the_next_up_rolls_it_back(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    docker, zfs, datasets = _setup(deployment)
    docker.bad.add(deployment.plan.stacks["dev"].services["gitea"].image)
    _kill_at(monkeypatch, "applying")
    with pytest.raises(Killed):
        _up(deployment, docker, zfs)
    monkeypatch.undo()
    recovery = _recover(deployment, docker, zfs)
    assert list(recovery.held) == ["dev"] and isinstance(recovery.held["dev"], upgrade_journal.RolledBack)
    assert "rolled back" in str(recovery.error())
    (record,) = upgrade_journal.list_records(deployment.out)
    assert record.state == "rolled-back"
    assert _read_back(zfs) == sorted(f"{d}@{record.snapshot}" for d in datasets)
    assert _gitea(docker).image == OLD and _gitea(docker).health == "healthy"


def test_killed_while_rolling_back_the_next_up_finishes_the_rollback(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    docker, zfs, datasets = _setup(deployment)
    docker.bad.add(deployment.plan.stacks["dev"].services["gitea"].image)
    _kill_at(monkeypatch, "rolling-back")
    with pytest.raises(Killed):
        _up(deployment, docker, zfs)
    monkeypatch.undo()
    assert _gitea(docker).image != OLD  # the bad version still runs
    assert "interrupted rollback" in str(_recover(deployment, docker, zfs).error())
    (record,) = upgrade_journal.list_records(deployment.out)
    assert record.state == "rolled-back"
    assert _gitea(docker).image == OLD and _gitea(docker).health == "healthy"
    assert _read_back(zfs) == sorted(f"{d}@{record.snapshot}" for d in datasets)
    with pytest.raises(upgrade_journal.UpgradeRefused, match="no upgrade to roll back"):
        upgrade_undo.rollback(deployment.out, docker, zfs, "dev", timeout=30, progress=lambda _m: None)


def test_an_upgrade_whose_homelab_still_runs_is_not_recovered(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    docker, zfs, _ = _setup(deployment)
    _kill_at(monkeypatch, "applying")
    with pytest.raises(Killed):
        _up(deployment, docker, zfs)
    monkeypatch.undo()
    (record,) = upgrade_journal.list_records(deployment.out)
    record.pid, record.started = os.getppid(), upgrade_journal.process_started(os.getppid())  # alive, not us
    record.save(deployment.out)
    docker.calls.clear()
    refused = _recover(deployment, docker, zfs).error()
    assert refused is not None and f"running in homelab process {os.getppid()}" in str(refused)
    assert refused.exit_code == 5 and docker.changes() == []
    with pytest.raises(upgrade_journal.UpgradeRefused, match="interrupted; `homelab up` finishes"):
        upgrade_undo.rollback(deployment.out, docker, zfs, "dev", timeout=30, progress=lambda _m: None)
    record.started = "1"  # the same pid, another process: the one that ran the upgrade is gone
    record.save(deployment.out)
    assert [r.state for r in _recover(deployment, docker, zfs).settled] == ["upgraded"]


def test_up_reads_the_journal_first(deployment: Deployment, monkeypatch: pytest.MonkeyPatch) -> None:
    """`homelab up` (in-process) after a killed one: the interrupted upgrade is finished, then the run goes on."""
    from homelab.runtime import docker as docker_module
    from homelab.runtime import zfs as zfs_module
    from tests.upgrade.test_cli_upgrade import _run

    docker, zfs, _ = _setup(deployment)
    _kill_at(monkeypatch, "applying")
    with pytest.raises(Killed):
        _up(deployment, docker, zfs)
    monkeypatch.undo()
    monkeypatch.setattr(docker_module, "Docker", lambda: docker)
    monkeypatch.setattr(zfs_module, "ZfsCli", lambda: zfs)
    monkeypatch.setattr(apply, "ZfsCli", lambda: zfs)
    # the edge dev is served through runs: `up dev` answers for it too
    docker.running += [container("homelab-edge", s) for s in deployment.plan.stacks["edge"].services]
    result = _run(deployment, "up", "dev", "--timeout", "30")
    assert result.exit_code == 0, result.output
    assert "dev: the upgrade of " in result.output and "was interrupted while applying" in result.output
    assert "dev: the interrupted upgrade is finished and healthy" in result.output
    assert [r.state for r in upgrade_journal.list_records(deployment.out)] == ["upgraded"]


# --- the Postgres dump --------------------------------------------------------------------------------


def _cloud(deployment: Deployment) -> tuple[ImageDocker, FakeZfs, Path]:
    """cloud runs with nextcloud on an old image; its datasets on the fake pool; db's dataset folder."""
    zfs = FakeZfs()
    zfs.add_pool("tank")
    stack = deployment.plan.stacks["cloud"]
    for name in sorted(upgrade.stack_datasets(deployment.plan, stack), key=len):
        for i in range(2, name.count("/") + 2):
            part = "/".join(name.split("/")[:i])
            if part not in zfs.local:
                zfs.create(part)
    running = [
        container(CLOUD, s, image=OLD_NEXTCLOUD if s == "nextcloud" else stack.services[s].image)
        for s in stack.services
    ]
    docker = ImageDocker(zfs, *running)
    docker.hashes[CLOUD] = {c.service: c.config_hash or "" for c in running} | {"nextcloud": "hash-new"}
    (dump,) = upgrade_journal.stack_dumps(stack)
    Path(dump.folder).mkdir(parents=True)
    db = next(d for d in deployment.plan.datasets if d.path == dump.folder)
    os.chown(dump.folder, db.uid, db.gid)  # as `storage apply` leaves a mountpoint (up refuses another owner)
    return docker, zfs, Path(dump.folder)


def _up_cloud(deployment: Deployment, docker: ImageDocker, zfs: FakeZfs, said: list[str]):  # type: ignore[no-untyped-def]
    data = yaml.safe_load((deployment.out / "cloud" / "compose.yaml").read_text())
    data["services"]["nextcloud"]["image"] = OLD_NEXTCLOUD
    previous = {"cloud": yaml.safe_dump(data).encode()}
    convergence = apply.converge(deployment.plan, deployment.out, docker, ["cloud"], include_removed_stacks=False)
    guard = upgrade.guard_for(
        convergence, deployment.plan, deployment.out, docker, previous, True, 30, said.append, zfs=zfs
    )
    return apply.apply(convergence, deployment.plan, docker, timeout=30, zfs=zfs, guard=guard, progress=said.append)


def test_the_catalogs_postgres_is_found_with_its_user_and_database(deployment: Deployment) -> None:
    (dump,) = upgrade_journal.stack_dumps(deployment.plan.stacks["cloud"])
    assert (dump.service, dump.user, dump.database) == ("db", "nextcloud", "nextcloud")
    assert dump.folder == next(d.path for d in deployment.plan.datasets if d.key == "nextcloud/db")
    assert upgrade_journal.stack_dumps(deployment.plan.stacks["dev"]) == ()  # gitea keeps SQLite


def test_postgres_is_dumped_into_its_dataset_before_the_snapshot(deployment: Deployment) -> None:
    docker, zfs, folder = _cloud(deployment)
    snapshots_at_dump: list[list[str]] = []
    exec_to_file = docker.exec_to_file

    def noting(*args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        snapshots_at_dump.append([n for n in zfs.local if "@homelab-upgrade-" in n])
        exec_to_file(*args, **kwargs)

    docker.exec_to_file = noting  # type: ignore[method-assign]
    docker.exec_output["db"] = b"COPY public.oc_users (uid) FROM stdin;\nalice\n\\.\n"
    said: list[str] = []
    _up_cloud(deployment, docker, zfs, said)
    assert ("exec", CLOUD, "db", "pg_dump", "--username", "nextcloud", "--dbname", "nextcloud", "--no-password") in (
        docker.calls
    )
    assert snapshots_at_dump == [[]]  # before any snapshot
    dump = folder / upgrade.DUMP_FILE
    assert dump.read_bytes().startswith(b"COPY public.oc_users")
    (record,) = upgrade_journal.list_records(deployment.out)
    assert record.dumps == [str(dump)] and record.state == "upgraded"
    db_dataset = next(d.name for d in deployment.plan.datasets if d.key == "nextcloud/db")
    assert f"{db_dataset}@{record.snapshot}" in zfs.local
    assert any("dumped db's database nextcloud" in line for line in said), said


def test_a_failed_dump_stops_the_upgrade_before_anything_changes(deployment: Deployment) -> None:
    from homelab.errors import CommandFailed

    docker, zfs, folder = _cloud(deployment)
    docker.exec_error["db"] = CommandFailed(["pg_dump"], 1, "", "pg_dump: error: connection refused")
    zfs.calls.clear()
    with pytest.raises(HomelabError, match=r"(?s)nothing of the stack was changed.*connection refused"):
        _up_cloud(deployment, docker, zfs, [])
    assert docker.changes() == [] and [c for c in zfs.changes() if c[0] == "snapshot"] == []
    (record,) = upgrade_journal.list_records(deployment.out)
    assert record.state == "abandoned" and not (folder / upgrade.DUMP_FILE).exists()


def test_a_stopped_postgres_needs_no_dump(deployment: Deployment) -> None:
    docker, zfs, _ = _cloud(deployment)
    docker.running = [c if c.service != "db" else container(CLOUD, "db", state="exited") for c in docker.running]
    said: list[str] = []
    _up_cloud(deployment, docker, zfs, said)
    assert not [c for c in docker.calls if c[0] == "exec"]
    assert any("db is not running, its files are consistent: no dump" in line for line in said)


# --- a running backup -------------------------------------------------------------------------------


def test_an_upgrade_is_refused_while_a_backup_reads_its_dataset(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from homelab.backup import lock

    docker, zfs, datasets = _setup(deployment)
    state_dir = tmp_path / "backup-state"
    monkeypatch.setenv("HOMELAB_BACKUP_STATE", str(state_dir))
    with lock.holding(state_dir, [datasets[0]], "20261127T090000Z"):  # what `backup run` holds while it reads
        zfs.calls.clear()
        with pytest.raises(upgrade_journal.UpgradeRefused) as caught:
            _up(deployment, docker, zfs)
        message = str(caught.value)
        assert f"dataset {datasets[0]} is being read by a running backup" in message
        assert "wait for the backup" in message and caught.value.exit_code == 5
        assert docker.changes() == [] and zfs.changes() == []
        _up(deployment, docker, zfs, snapshot=False)  # --no-snapshot: no snapshot for the backup to be in the way of
    assert upgrade_journal.list_records(deployment.out)[-1].state == "upgraded"

    stale = state_dir / lock.FOLDER / (datasets[0].replace("/", "%") + lock.SUFFIX)
    stale.write_text('{"pid": 1, "run": "killed", "dataset": "x"}\n')  # a killed run's marker: not locked
    docker.running = [c if c.service != "gitea" else container(DEV, "gitea", image=OLD) for c in docker.running]
    _up(deployment, docker, zfs)
    assert upgrade_journal.list_records(deployment.out)[-1].snapshot is not None
