"""Rollbacks on the recording fakes (ZFS with files): the file comparison and put-back, the wait for the
previous version's start, --keep-data per app, `homelab rollback`'s question, `status` on an unsettled
journal, another stack's journal never stopping `up`, a backup waiting for an upgrade, a crash reported
with its exit code."""

from __future__ import annotations

import os
import stat
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
from typer import testing as typer_testing
from typer.testing import CliRunner

from homelab.backup import run_backup
from homelab.backup.lock import UPGRADES, holding, running_datasets
from homelab.cli import app
from homelab.engine import compose as apply
from homelab.runtime import docker as docker_module
from homelab.runtime import zfs as zfs_module
from homelab.upgrade import journal as upgrade_journal
from homelab.upgrade import restore as upgrade_restore
from homelab.upgrade import run as upgrade_run
from homelab.upgrade import settle as upgrade_settle
from homelab.upgrade import undo as upgrade_undo
from homelab.upgrade.journal import ImageChange, Record
from homelab.upgrade.restore import Changes, _sync
from tests.backup.fast import make_fast_lab
from tests.fakes.docker import container
from tests.fakes.zfs import FakeZfs
from tests.unit.conftest import Deployment
from tests.upgrade.test_journal import Killed, _kill_at
from tests.upgrade.test_upgrade import ImageDocker, _setup, _up

runner = CliRunner()


def _tree(root: Path) -> dict[str, tuple[int, int, int, int, bytes | str | None]]:
    """Every entry under root: kind and permission bits, owner, mtime, content (or link target)."""
    seen = {}
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        body: bytes | str | None = None
        if stat.S_ISREG(st.st_mode):
            body = path.read_bytes()
        elif stat.S_ISLNK(st.st_mode):
            body = str(path.readlink())
        mtime = 0 if stat.S_ISDIR(st.st_mode) else st.st_mtime_ns
        seen[str(path.relative_to(root))] = (st.st_mode, st.st_uid, st.st_gid, mtime, body)
    return seen


def test_put_back_makes_the_live_tree_equal_the_snapshot_and_counts_what_it_discards(tmp_path: Path) -> None:
    old, live = tmp_path / "old", tmp_path / "live"
    for root in (old, live):
        (root / "keep").mkdir(parents=True)
        (root / "keep" / "same").write_bytes(b"same")
        (root / "changed").write_bytes(b"v1")
        (root / "link").symlink_to("keep/same")
        (root / "turns-into-a-folder").write_bytes(b"file")
    os.utime(live / "keep" / "same", ns=(1, (old / "keep" / "same").stat().st_mtime_ns))
    (old / "gone-dir").mkdir()
    (old / "gone-dir" / "f").write_bytes(b"deleted by v2")
    os.mkfifo(old / "fifo")
    (live / "changed").write_bytes(b"v2 rewrote this")
    (live / "new-dir").mkdir()
    (live / "new-dir" / "upload").write_bytes(b"x" * 1000)
    (live / "link").unlink()
    (live / "link").symlink_to("changed")
    (live / "turns-into-a-folder").unlink()
    (live / "turns-into-a-folder").mkdir()
    (live / "keep").chmod(0o700)
    want = _tree(old)

    dry = _sync(old, live, Changes("tank/x"), apply=False)
    # written: changed, new-dir/upload, link (retargeted); removed: gone-dir, gone-dir/f, fifo, the file now a folder
    assert (dry.written, dry.files, dry.removed) == (len(b"v2 rewrote this") + 1000, 3, 4)
    assert dry.describe() == "tank/x: 1015 bytes in 3 files written, 4 removed"
    assert _tree(live) != want  # a dry run changes nothing

    done = _sync(old, live, Changes("tank/x"), apply=True)
    assert (done.written, done.files, done.removed) == (dry.written, dry.files, dry.removed)
    assert dry.restore == done.restore == len(b"v1") + len(b"deleted by v2") + len(b"file")  # written back
    assert _tree(live) == want
    assert not _sync(old, live, Changes("tank/x"), apply=False).any  # nothing left to put back


def test_the_rollback_waits_as_long_as_the_previous_versions_healthcheck_allows() -> None:
    compose = b"""services:
  db: {healthcheck: {test: [CMD, x], interval: 1s, retries: 5, start_period: 2m}}
  app: {healthcheck: {test: [CMD, x]}}
  off: {healthcheck: {disable: true}}
  plain: {image: x}
"""
    assert upgrade_undo.rollback_wait(compose, 30) == 120 + 6  # start_period + interval x (retries + 1)
    assert upgrade_undo.rollback_wait(compose, 600) == 600
    assert upgrade_undo.rollback_wait(b"services: {app: {healthcheck: {test: [CMD, x]}}}", 10) == 120  # defaults
    assert upgrade_undo.rollback_wait(b"services: {a: {healthcheck: {interval: 1m30s, retries: 0}}}", 1) == 90


@pytest.mark.parametrize(
    ("old", "new", "refused"),
    [
        ("nextcloud:29.0.0-apache", "nextcloud:30.0.0-apache", "downgrading is not supported"),
        ("docker.io/gitea/gitea:1.21", "gitea/gitea:1.22", "Gitea refuses"),
        ("postgres:15.8-alpine", "postgres:16.6-alpine", "another major version"),
        ("postgres:16.5-alpine", "postgres:16.6-alpine", None),
        ("rocker/rstudio:4.4.1", "rocker/rstudio:4.4.2", None),
    ],
)
def test_keep_data_is_refused_where_the_older_version_cannot_read_the_newer_data(
    old: str, new: str, refused: str | None
) -> None:
    record = Record("s", "t", [], [ImageChange("svc", old, new)])
    if refused is None:
        upgrade_restore.keeps_data(record)
    else:
        with pytest.raises(upgrade_journal.UpgradeRefused, match=refused):
            upgrade_restore.keeps_data(record)


def _run(deployment: Deployment, *args: str):  # type: ignore[no-untyped-def]
    return runner.invoke(app, [*args, "--config", str(deployment.config), "--out", str(deployment.out)])


def test_rollback_asks_before_discarding_writes_and_keep_data_discards_nothing(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    docker, zfs, datasets = _setup(deployment)
    _up(deployment, docker, zfs)
    monkeypatch.setattr(docker_module, "Docker", lambda: docker)
    monkeypatch.setattr(zfs_module, "ZfsCli", lambda: zfs)
    written = Path(zfs.get(datasets[0], "mountpoint")) / "written-by-v2"
    written.write_bytes(b"12345")
    docker.calls.clear()
    refused = _run(deployment, "rollback", "dev")  # no terminal: refused
    assert refused.exit_code == 5, refused.output
    assert f"{datasets[0]}: 5 bytes in 1 files written, 0 removed" in refused.output
    assert "--discard-writes" in refused.output and written.exists() and docker.changes() == []
    assert upgrade_journal.list_records(deployment.out)[0].state == "upgraded"

    kept = _run(deployment, "rollback", "dev", "--keep-data")  # the catalog's gitea cannot go back on new data
    assert kept.exit_code == 5 and "--keep-data is not possible for gitea" in kept.output, kept.output

    done = _run(deployment, "rollback", "dev", "--discard-writes")
    assert done.exit_code == 0, done.output
    assert not written.exists()
    (record,) = upgrade_journal.list_records(deployment.out)
    assert record.state == "rolled-back" and record.safety and record.data_restored
    assert f"safety snapshot @{record.safety}" in done.output
    assert record.safety in zfs.snapshots(datasets[0])
    assert zfs.snapshot_dir(datasets[0], record.safety).joinpath("written-by-v2").read_bytes() == b"12345"
    assert f"(discarded writes: @{record.safety})" in _run(deployment, "upgrade", "--list").output


def test_a_rollback_without_room_to_take_the_files_back_is_refused_before_anything_stops(
    deployment: Deployment,
) -> None:
    docker, zfs, datasets = _setup(deployment)
    _up(deployment, docker, zfs)
    (Path(zfs.get(datasets[0], "mountpoint")) / "upload").write_bytes(b"x" * 100)
    zfs.local[datasets[0]]["available"] = str(1 << 20)
    docker.calls.clear()
    with pytest.raises(upgrade_journal.UpgradeRefused, match=f"{datasets[0]} needs 16 MiB free to take its files"):
        upgrade_undo.rollback(deployment.out, docker, zfs, "dev", timeout=5, progress=print, decide=lambda _l: True)
    assert docker.changes() == [] and upgrade_journal.list_records(deployment.out)[0].state == "upgraded"


def test_rollback_on_a_terminal_shows_what_it_would_discard_and_asks(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    docker, zfs, datasets = _setup(deployment)
    _up(deployment, docker, zfs)
    monkeypatch.setattr(docker_module, "Docker", lambda: docker)
    monkeypatch.setattr(zfs_module, "ZfsCli", lambda: zfs)
    (Path(zfs.get(datasets[0], "mountpoint")) / "upload").write_bytes(b"abc")
    monkeypatch.setattr(typer_testing._NamedTextIOWrapper, "isatty", lambda _self: True)  # the runner's stdin
    no = runner.invoke(
        app, ["rollback", "dev", "--config", str(deployment.config), "--out", str(deployment.out)], input="n\n"
    )
    assert no.exit_code == 5 and f"{datasets[0]}: 3 bytes in 1 files written" in no.output, no.output
    assert "roll back anyway (a safety snapshot keeps it)?" in no.output
    yes = runner.invoke(
        app, ["rollback", "dev", "--config", str(deployment.config), "--out", str(deployment.out)], input="y\n"
    )
    assert yes.exit_code == 0, yes.output
    assert upgrade_journal.list_records(deployment.out)[0].state == "rolled-back"


def test_status_exits_1_while_a_rollback_is_unfinished_and_other_stacks_still_come_up(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    docker, zfs, _ = _setup(deployment)
    docker.bad.add(deployment.plan.stacks["dev"].services["gitea"].image)
    _kill_at(monkeypatch, "rolling-back")
    with pytest.raises(Killed):
        _up(deployment, docker, zfs)
    monkeypatch.undo()
    monkeypatch.setattr(docker_module, "Docker", lambda: docker)
    status = _run(deployment, "status")
    assert status.exit_code == 1
    assert "rollback of dev unfinished (journal dev-" in status.output, status.output
    # `up media` settles only media's journal: dev's stays as it is
    recovery = upgrade_settle.recover(deployment.out, docker, zfs, timeout=5, progress=print, stacks=["media"])
    assert recovery.settled == [] and recovery.error() is None
    assert upgrade_journal.unsettled(deployment.out, ["media"]) == []
    assert [r.state for r in upgrade_journal.list_records(deployment.out)] == ["rolling-back"]


def test_a_served_versions_interrupted_rollback_is_not_finished_by_up_when_it_would_discard_writes(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    docker, zfs, datasets = _setup(deployment)
    _up(deployment, docker, zfs)
    (Path(zfs.get(datasets[0], "mountpoint")) / "served").write_bytes(b"a user's upload")
    _kill_at(monkeypatch, "rolling-back")
    with pytest.raises(Killed):
        upgrade_undo.rollback(deployment.out, docker, zfs, "dev", timeout=5, progress=print, decide=lambda _l: True)
    monkeypatch.undo()
    refused = upgrade_settle.recover(deployment.out, docker, zfs, timeout=5, progress=print).error()
    assert refused is not None and refused.exit_code == 5
    assert "rollback of dev unfinished: it would discard" in str(refused)
    assert (Path(zfs.get(datasets[0], "mountpoint")) / "served").exists()
    record = upgrade_undo.rollback(
        deployment.out, docker, zfs, "dev", timeout=5, progress=print, decide=lambda _l: True
    )
    assert record.state == "rolled-back" and "finished by `homelab rollback`" in record.notes[-1]


def _wire(monkeypatch: pytest.MonkeyPatch, docker: ImageDocker, zfs: FakeZfs) -> None:
    """The CLI's drivers: the fakes (journal_first's and apply's ZfsCli too)."""
    monkeypatch.setattr(docker_module, "Docker", lambda: docker)
    monkeypatch.setattr(upgrade_run, "ZfsCli", lambda: zfs)
    monkeypatch.setattr(apply, "ZfsCli", lambda: zfs)


def test_up_of_every_stack_brings_up_the_others_when_one_rollback_cannot_be_finished(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    docker, zfs, datasets = _setup(deployment)
    _up(deployment, docker, zfs)
    served = Path(zfs.get(datasets[0], "mountpoint")) / "served"
    served.write_bytes(b"a user's upload")  # written through the new version: no `up` may discard it unasked
    _kill_at(monkeypatch, "rolling-back")
    with pytest.raises(Killed):
        upgrade_undo.rollback(deployment.out, docker, zfs, "dev", timeout=5, progress=print, decide=lambda _l: True)
    monkeypatch.undo()
    _wire(monkeypatch, docker, zfs)
    docker.calls.clear()
    result = _run(deployment, "up")
    assert result.exit_code == 5, result.output
    assert docker.changes() == [("up", f"homelab-{s}") for s in ("edge", "media", "cloud", "monitoring")]
    assert "; not brought up: dev (below)" in result.output, result.output
    error = result.output[result.output.index("error: ") :]
    assert error.startswith("error: rollback of dev unfinished (journal dev-"), error
    assert error.splitlines()[0].endswith(": rolling-back); `homelab rollback dev` (it asks first) finishes it")
    assert "rollback of dev unfinished: it would discard" in error and "--discard-writes" in error
    assert served.read_bytes() == b"a user's upload"
    assert [r.state for r in upgrade_journal.list_records(deployment.out)] == ["rolling-back"]


def test_finishing_an_interrupted_upgrade_marks_its_datasets_for_backups_as_the_upgrade_does(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    docker, zfs, datasets = _setup(deployment)
    state = Path(deployment.loaded.config.backup_state_dir)
    _kill_at(monkeypatch, "applying")
    with pytest.raises(Killed):
        _up(deployment, docker, zfs)
    monkeypatch.undo()
    _wire(monkeypatch, docker, zfs)
    docker.running += [container("homelab-edge", s) for s in deployment.plan.stacks["edge"].services]
    with holding(state, [datasets[0]], "20261202T120000Z"):  # a backup run reads one of dev's datasets
        docker.calls.clear()
        refused = _run(deployment, "up", "dev")
        assert refused.exit_code == 5, refused.output
        assert f"a backup run is reading {datasets[0]}" in refused.output
        assert docker.changes() == [] and upgrade_journal.list_records(deployment.out)[0].state == "applying"
    marked_at_up: list[set[str]] = []
    up = docker.up

    def noting(project: str, stack_dir: Path, **kwargs) -> None:  # type: ignore[no-untyped-def]
        marked_at_up.append(running_datasets(state, UPGRADES))
        up(project, stack_dir, **kwargs)

    docker.up = noting  # type: ignore[method-assign]
    finished = _run(deployment, "up", "dev")
    assert finished.exit_code == 0, finished.output
    assert marked_at_up[0] == set(datasets)  # a backup started now waits (test_a_backup_waits_while_...)
    assert upgrade_journal.list_records(deployment.out)[0].state == "upgraded"


def test_a_version_that_exits_at_once_is_reported_with_its_exit_code_and_last_lines(deployment: Deployment) -> None:
    docker, zfs, _ = _setup(deployment)
    image = deployment.plan.stacks["dev"].services["gitea"].image
    docker.bad.add(image)
    up = docker.up

    def crashing_up(project, stack_dir, **kwargs):  # type: ignore[no-untyped-def]
        up(project, stack_dir, **kwargs)
        for i, c in enumerate(docker.running):
            if c.image == image:
                docker.running[i] = replace(c, state="restarting", health="unhealthy", exit_code=3, restart_count=4)
                docker.logs[c.id] = "starting\nFATAL: config.ini: permission denied"

    docker.up = crashing_up  # type: ignore[method-assign]
    with pytest.raises(upgrade_journal.RolledBack) as caught:
        _up(deployment, docker, zfs)
    first, *rest = str(caught.value).splitlines()
    assert first == (
        "dev: upgrade rolled back: gitea exited with code 3 (restarted 4 times); "
        "last output: starting | FATAL: config.ini: permission denied"
    )
    assert rest[0].startswith("  stack dev: service gitea ")  # the gate's own verdict, after


def test_a_backup_waits_while_an_upgrade_marks_its_dataset(tmp_path: Path) -> None:
    lab = make_fast_lab(tmp_path)
    (lab.data / "f").write_bytes(b"data")
    said: list[str] = []
    released = threading.Event()

    def upgrade() -> None:
        with holding(lab.state, [lab.dataset], "upgrade of dev", UPGRADES):
            time.sleep(1.5)
            released.set()

    thread = threading.Thread(target=upgrade)
    thread.start()
    time.sleep(0.3)
    report = run_backup(lab.ctx(), say=said.append)
    thread.join()
    assert said[0] == f"waiting for the upgrade of {lab.dataset} to end"
    assert released.is_set() and report.record.result == "success"


def test_an_upgrade_refuses_while_a_backup_holds_its_dataset(tmp_path: Path) -> None:
    with (
        holding(tmp_path, ["tank/a"], "run-1"),
        pytest.raises(upgrade_journal.UpgradeRefused, match="a backup run is reading tank/a"),
        upgrade_undo.marked(tmp_path, ["tank/a", "tank/b"], "upgrade of dev"),
    ):
        pass
