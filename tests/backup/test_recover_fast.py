"""`homelab recover` with the fakes: the remote a FakeRclone folder, plain folders for datasets, Docker recorded.
The real programs (zfs-fuse, rclone crypt, `rclone serve sftp`) are in test_recover_real.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from homelab.backup import BackupError, run_backup
from homelab.backup.recover import RecoverError, Target, TargetNotEmpty, recover, rewrite_config
from homelab.engine.compose_engine import ComposeEngine
from homelab.errors import ExitCode
from homelab.layout import project_name
from homelab.plan import build_plan
from tests.backup.conftest import KEY, fill, tree
from tests.backup.fast import FastLab, make_fast_lab
from tests.fakes.docker import FakeDocker, container

DUMP = b"--\n-- PostgreSQL database dump\n--\n\nCREATE TABLE t ();\n\n--\n-- PostgreSQL database dump complete\n--\n\n"


def _lab(tmp_path: Path, **kwargs: object) -> FastLab:
    lab = make_fast_lab(tmp_path, backup={"sentinels": True}, **kwargs)  # type: ignore[arg-type]
    fill(lab.data, small=5, large=0, sparse=1 << 12)
    (d,) = [d for d in build_plan(lab.loaded).datasets if d.key == KEY]
    os.chown(lab.data, d.uid, d.gid)  # as `up` leaves it (it refuses a folder of another owner)
    return lab


def _recover(lab: FastLab, tmp_path: Path, name: str = "new", **kwargs: object):  # type: ignore[no-untyped-def]
    (lab.rclone.root / "recover").unlink(missing_ok=True)
    (lab.rclone.root / "recover").symlink_to(lab.rclone.root / "offsite")  # hl-recover-crypt: is that folder
    target = Target(
        remote="unused",
        password="p",
        salt="s",
        config_dir=tmp_path / f"{name}-cfg",
        mountpoint=str(tmp_path / f"{name}-srv"),
        folders=True,
        **kwargs,  # type: ignore[arg-type]
    )
    return target, recover(target, driver=lab.rclone, say=print, clock=lab.clock)


def test_recovered_onto_folders_with_the_sentinel_and_the_time_it_took(tmp_path: Path) -> None:
    lab = _lab(tmp_path)
    ctx = lab.ctx()
    record = run_backup(ctx).record
    assert (lab.data / "homelab-sentinel.txt").read_text() == record.id + "\n"
    target, result = _recover(lab, tmp_path)
    assert tree(tmp_path / "new-srv" / "rstudio" / "home") == tree(lab.data)
    assert result.sentinels == [f"rstudio: rstudio/home homelab-sentinel.txt = {record.id}"]
    assert [s[0] for s in result.steps] == [
        "bundle",
        "target",
        "config",
        "remote",
        "datasets",
        f"restore {KEY}",
        "certificates",
        "databases",
        "sentinels",
    ]
    assert result.rto >= sum(s[1] for s in result.steps) * 0.99
    assert result.rpo == 0  # the fake clock does not move: the data is as old as the backup
    written = yaml.safe_load((target.config_dir / "homelab.yaml").read_text())
    assert written["storage"]["mountpoint"] == str(tmp_path / "new-srv")

    # a dataset altered after the recovery makes its sentinel read wrong on the next one
    (lab.data / "homelab-sentinel.txt").write_text("changed\n")
    with pytest.raises(
        TargetNotEmpty, match=r"dataset rstudio/home \(.*new-srv/rstudio/home\) is not empty"
    ) as refused:
        _recover(lab, tmp_path, "new")
    assert refused.value.exit_code == ExitCode.REFUSED
    assert "this machine already has a homelab config" in str(refused.value)
    _, again = _recover(lab, tmp_path, "new", replace=True)
    assert again.sentinels == result.sentinels


def test_a_dump_that_would_not_load_stops_before_anything_is_written(tmp_path: Path) -> None:
    lab = _lab(tmp_path, apps=frozenset({"rstudio", "nextcloud"}))
    docker = FakeDocker(container(project_name("cloud"), "db"))
    docker.exec_output["db"] = DUMP[:40]  # cut short: no trailer
    run_backup(lab.ctx(engine=docker))
    with pytest.raises(RecoverError, match=r"the dump of cloud/db is not a complete pg_dump \(it would not load\)"):
        _recover(lab, tmp_path)
    assert not (tmp_path / "new-cfg" / "homelab.yaml").exists() and not (tmp_path / "new-srv").exists()

    docker.exec_output["db"] = DUMP
    run_backup(lab.ctx(engine=docker))
    _, result = _recover(lab, tmp_path, "second")
    assert result.sentinels


def test_the_config_rewritten_for_another_pool_mountpoint_and_domain() -> None:
    original = yaml.safe_dump(
        {
            "storage": {"pool": "tank", "root": "tank/homelab", "mountpoint": "/tank/homelab"},
            "domain": {"name": "example.com", "acme": {"email": "a@example.com"}},
            "backup": {"state_dir": "/tank/homelab/.state"},
        }
    ).encode()
    target = Target("r", "p", "s", Path("/x"), pool="vault", mountpoint="/srv/lab", domain="example.org")
    data = yaml.safe_load(rewrite_config(original, target))
    assert data["storage"] == {"pool": "vault", "root": "vault/homelab", "mountpoint": "/srv/lab"}
    assert data["backup"]["state_dir"] == "/srv/lab/.state"
    assert data["domain"]["name"] == "example.org" and data["domain"]["acme"]["staging"] is True
    unchanged = b"# comments kept\nstorage: {pool: tank}\n"
    assert rewrite_config(unchanged, Target("r", "p", "s", Path("/x"))) == unchanged


def test_a_database_not_backed_up_starts_empty_and_loads_its_dump_then_its_row_reads_back(tmp_path: Path) -> None:
    lab = _lab(tmp_path, apps=frozenset({"rstudio", "nextcloud"}))  # backup.datasets: rstudio/home only
    docker = FakeDocker(container(project_name("cloud"), "db"))
    docker.exec_output["db"] = DUMP
    record = run_backup(lab.ctx(engine=docker)).record
    (write,) = [c for c in docker.calls if c[0] == "exec<"]
    assert write[2:4] == ("db", "psql") and f"run={record.id}" in write and b"INSERT INTO homelab_sentinel" in write[-1]

    recovering = FakeDocker()
    recovering.exec_answer["db"] = record.id + "\n"
    target = Target("unused", "p", "s", tmp_path / "new-cfg", mountpoint=str(tmp_path / "new-srv"), folders=True)
    (lab.rclone.root / "recover").symlink_to(lab.rclone.root / "offsite")
    result = recover(target, driver=lab.rclone, engine=lambda _: ComposeEngine(recovering), clock=lab.clock)
    # `up`'s session: the engine checked, every stack up in dependency order, then the declared state read
    ups = [c[1] for c in recovering.calls if c[0] == "up"]
    assert ups == [project_name(s) for s in ("edge", "cloud", "dev")], recovering.calls
    assert result.started == ["edge", "cloud", "dev"]
    load, read = [c for c in recovering.calls if c[0] == "exec<"]
    assert "--single-transaction" in load and load[-1] == DUMP
    assert b"SELECT run FROM homelab_sentinel" in read[-1]
    assert f"cloud: cloud/db homelab_sentinel = {record.id}" in result.sentinels
    assert [s[0] for s in result.steps][-4:] == ["databases", "stacks", "load cloud/db", "sentinels"]
    assert "cloud/db: will start empty and load the dump" in result.steps[-4][2]


def test_a_service_that_does_not_become_healthy_stops_the_recovery_before_the_dumps_and_sentinels(
    tmp_path: Path,
) -> None:
    """`up`'s declared-state gate: the recovery says which service is down and reads nothing through it."""
    from homelab.engine.health import ApplyFailed

    lab = _lab(tmp_path, apps=frozenset({"rstudio", "nextcloud"}))
    docker = FakeDocker(container(project_name("cloud"), "db"))
    docker.exec_output["db"] = DUMP
    run_backup(lab.ctx(engine=docker))
    recovering = FakeDocker()
    recovering.health["db"] = "unhealthy"
    target = Target("unused", "p", "s", tmp_path / "new-cfg", mountpoint=str(tmp_path / "new-srv"), folders=True)
    (lab.rclone.root / "recover").symlink_to(lab.rclone.root / "offsite")
    with pytest.raises(ApplyFailed, match=r"\bdb\b"):
        recover(target, driver=lab.rclone, engine=lambda _: ComposeEngine(recovering), clock=lab.clock)
    assert not [c for c in recovering.calls if c[0] == "exec<"]  # no dump loaded, no row read


def test_a_dump_the_server_refuses_is_one_message(tmp_path: Path) -> None:
    from homelab.errors import CommandFailed

    lab = _lab(tmp_path, apps=frozenset({"rstudio", "nextcloud"}))
    docker = FakeDocker(container(project_name("cloud"), "db"))
    docker.exec_output["db"] = DUMP
    run_backup(lab.ctx(engine=docker))
    recovering = FakeDocker()
    recovering.exec_error["db"] = CommandFailed(["psql"], 3, "", 'ERROR:  relation "t" already exists')
    target = Target("unused", "p", "s", tmp_path / "new-cfg", mountpoint=str(tmp_path / "new-srv"), folders=True)
    (lab.rclone.root / "recover").symlink_to(lab.rclone.root / "offsite")
    with pytest.raises(RecoverError, match=r"(?s)the dump of cloud/db did not load .*relation \"t\" already exists"):
        recover(target, driver=lab.rclone, engine=lambda _: ComposeEngine(recovering), clock=lab.clock)


def test_a_recovery_drill_is_recorded_for_status_and_monitoring_and_fails_on_a_damaged_object(tmp_path: Path) -> None:
    from homelab.backup import status
    from homelab.backup.recovery_drill import recovery_drill

    lab = _lab(tmp_path)
    ctx = lab.ctx()
    run_backup(ctx)
    (lab.rclone.root / "recover").symlink_to(lab.rclone.root / "offsite")
    lab.clock.advance(hours=2)
    done = recovery_drill(ctx, driver=lab.rclone)
    assert (done.result, done.datasets, done.sentinels) == ("success", 1, 1)
    assert done.rpo_seconds == 7200
    assert not list(ctx.state.scratch.glob("recovery-drill-*"))  # the scratch is gone
    info = status(ctx)
    assert info.last_recovery_drill == done and info.last_good_recovery_drill_age_days == 0
    epoch = int(lab.clock.now.timestamp())
    assert (lab.state / "recovery_drill.status").read_text() == f"{epoch} 0\n"

    lab.clock.advance(days=32)
    assert status(ctx).problems == [f"the last recovery drill ({done.id}) is older than 31 days"]

    (lab.current / "plainsparse.img").write_bytes(b"\0" * 4096)  # same size, other bytes
    with pytest.raises(BackupError, match=r"recovery drill failed:\n  rstudio/home: plainsparse.img: content differs"):
        recovery_drill(ctx, driver=lab.rclone)
    assert (lab.state / "recovery_drill.status").read_text() == f"{epoch} 1\n"
    assert status(ctx).problems[0].startswith("the last recovery drill (")
    assert "failed: rstudio/home: plainsparse.img: content differs" in status(ctx).problems[0]


def test_the_cli_reads_the_secrets_passes_the_options_and_prints_rto_and_rpo(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from homelab.backup import recover as module
    from homelab.backup.recover import Recovered
    from homelab.cli import app

    seen: list[Target] = []

    def fake(target: Target, **kwargs: object) -> Recovered:
        seen.append(target)
        assert kwargs["engine"] is None  # --no-start
        return Recovered(run="20261201T030000Z", sentinels=["rstudio: rstudio/home x = y"], rto=12.5, rpo=7200)

    monkeypatch.setattr(module, "recover", fake)
    (tmp_path / "pw").write_text("the-password\n")
    args = ["recover", "--remote", ":sftp,host=h:p", "--config-dir", str(tmp_path / "cfg"), "--password-file"]
    args += [str(tmp_path / "pw"), "--pool", "vault", "--at", "2026-12-01", "--folders", "--no-start"]
    result = CliRunner().invoke(app, args, input="the-salt\n")
    assert result.exit_code == 0, result.output
    (target,) = seen
    assert (target.password, target.salt, target.pool, target.folders) == ("the-password", "the-salt", "vault", True)
    assert target.at is not None and target.at.isoformat() == "2026-12-01T00:00:00+00:00"
    assert "sentinel rstudio: rstudio/home x = y" in result.output
    assert "recovered 20261201T030000Z: RTO 12.5s, RPO 2.0h" in result.output
    assert "the-password" not in result.output and "the-salt" not in result.output

    def refused(target: Target, **kwargs: object) -> Recovered:
        raise TargetNotEmpty("refusing to recover: /x/homelab.yaml exists")

    monkeypatch.setattr(module, "recover", refused)
    result = CliRunner().invoke(app, args, input="s\n")
    assert result.exit_code == ExitCode.REFUSED and "refusing to recover" in result.output
