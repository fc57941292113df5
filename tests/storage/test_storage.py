"""storage plan/apply against a real zfs-fuse pool (pool version 23) and a hand-made OpenZFS pool."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from homelab.cli.storage import storage_app
from homelab.config.loader import load
from homelab.plan import build_plan
from homelab.storage import PoolSupport, apply_storage, fit, plan_storage, probe
from tests.fakes.zfs import OPENZFS_TABLE
from tests.storage.zfs import write_config, zfs_get

WANT = {"atime": "off", "compression": "lz4", "xattr": "sa", "acltype": "posix", "recordsize": "1M"}


def test_openzfs_pool_takes_everything() -> None:
    features = {"feature@lz4_compress": "active", "feature@large_blocks": "enabled", "feature@zstd_compress": "enabled"}
    support = PoolSupport("tank", "-", OPENZFS_TABLE, features, 16 << 20)
    assert fit(WANT, support) == (WANT, [])
    assert support.supports_value("compression", "zstd-3")


def test_openzfs_pool_without_features_falls_back() -> None:
    support = PoolSupport("old", "28", OPENZFS_TABLE, {}, 128 << 10)
    props, warnings = fit(WANT, support)
    assert props == {"atime": "off", "compression": "on", "xattr": "sa", "acltype": "posix", "recordsize": "128K"}
    assert len(warnings) == 2


@pytest.mark.real
def test_probe_zfs_fuse(make_pool) -> None:
    pool = make_pool()
    support = probe(pool)
    assert support.version == "23"
    assert support.max_recordsize == 128 << 10
    props, warnings = fit({**WANT, "logbias": "throughput"}, support)
    assert props == {"atime": "off", "compression": "on", "xattr": "on", "recordsize": "128K", "logbias": "throughput"}
    assert any("compression=lz4" in w and "using on" in w for w in warnings)
    assert any("acltype" in w and "skipped" in w for w in warnings)
    assert any("xattr=sa" in w for w in warnings)
    assert any("recordsize=1M" in w and "128K" in w for w in warnings)


@pytest.mark.real
def test_plan_then_apply_creates_datasets_owned_and_fit(make_pool, tmp_path: Path) -> None:
    pool = make_pool()
    mount = tmp_path / "srv"
    plan = build_plan(load(write_config(tmp_path / "cfg", pool=pool, mountpoint=mount)))
    planned = plan_storage(plan)
    creates = [s.target for s in planned.steps if s.action == "create"]
    assert creates[0] == f"{pool}/homelab"
    assert {d.name for d in plan.datasets} <= set(creates)
    assert subprocess.run(["zfs", "list", f"{pool}/homelab"], capture_output=True).returncode != 0  # plan only

    reported = []
    apply_storage(plan, planned, report=reported.append)
    assert [s.target for s in reported] == [s.target for s in planned.steps]
    by_key = {d.key: d for d in plan.datasets}
    media, db, gitea = by_key["plex/media"], by_key["nextcloud/db"], by_key["gitea/data"]
    assert zfs_get(media.name, "recordsize") == str(128 << 10)  # 1M capped on pool v23
    assert zfs_get(db.name, "recordsize") == str(16 << 10)
    assert zfs_get(db.name, "logbias") == "throughput"
    assert zfs_get(gitea.name, "recordsize") == str(64 << 10)
    assert zfs_get(gitea.name, "atime") == "off"
    assert zfs_get(gitea.name, "compression") == "on"
    assert zfs_get(f"{pool}/homelab", "mountpoint") == str(mount)
    for d in plan.datasets:
        info = Path(d.path).stat()
        assert (info.st_uid, info.st_gid) == (d.uid, d.gid), d.key
    assert (Path(by_key["nextcloud/data"].path).stat().st_uid, Path(db.path).stat().st_uid) == (33, 70)
    acme = Path(by_key["edge/acme"].path) / "acme.json"
    info = acme.lstat()
    assert stat.S_ISREG(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o600 and info.st_size == 0

    again = plan_storage(plan)
    assert again.changes == []
    assert {s.action for s in again.steps} <= {"ok", "warn"}


@pytest.mark.real
def test_apply_adjusts_properties_never_destroys_or_shrinks(make_pool, tmp_path: Path) -> None:
    pool = make_pool()
    mount = tmp_path / "srv"
    extra = {
        "storage": {
            "pool": pool,
            "root": f"{pool}/homelab",
            "mountpoint": str(mount),
            "datasets": {"gitea/config": {"properties": {"quota": "1M"}}},
        }
    }
    config = write_config(tmp_path / "cfg", pool=pool, mountpoint=mount, apps={"gitea"}, extra=extra)
    plan = build_plan(load(config))
    by_key = {d.key: d for d in plan.datasets}
    data, conf = by_key["gitea/data"], by_key["gitea/config"]
    # a previous layout: the root and data exist with other settings, plus a dataset the plan does not know
    subprocess.run(["zfs", "create", "-o", f"mountpoint={mount}", f"{pool}/homelab"], check=True)
    subprocess.run(["zfs", "create", "-p", "-o", "recordsize=128K", "-o", "atime=on", data.name], check=True)
    subprocess.run(["zfs", "create", "-o", "quota=100M", conf.name], check=True)
    subprocess.run(["zfs", "create", f"{pool}/homelab/old"], check=True)
    (Path(data.path) / "keep.txt").write_text("precious")
    with (Path(conf.path) / "big.bin").open("wb") as f:
        f.write(os.urandom(3 << 20))
    subprocess.run(["sync"], check=True)

    planned = plan_storage(plan)
    text = [str(s) for s in planned.steps]
    assert f"set    {data.name}: atime on -> off" in text
    assert f"set    {data.name}: recordsize 128K -> 64K (applies to files written from now on)" in text
    assert any(s.action == "warn" and "quota would shrink from 100M to 1M" in s.detail for s in planned.steps), text
    assert not any(s.action == "create" and s.target in (data.name, conf.name) for s in planned.steps)
    apply_storage(plan, planned)
    assert zfs_get(data.name, "atime") == "off" and zfs_get(data.name, "recordsize") == str(64 << 10)
    assert zfs_get(conf.name, "quota") == str(100 << 20)  # never shrunk below use
    assert (Path(data.path) / "keep.txt").read_text() == "precious"
    assert zfs_get(f"{pool}/homelab/old", "type") == "filesystem"


@pytest.mark.real
def test_cli_plan_and_apply(make_pool, tmp_path: Path) -> None:
    pool = make_pool()
    config = write_config(tmp_path / "cfg", pool=pool, mountpoint=tmp_path / "srv", apps={"plex"})
    runner = CliRunner()
    result = runner.invoke(storage_app, ["plan", "--config", str(config)])
    assert result.exit_code == 0, result.output
    assert f"create {pool}/homelab/plex/media: atime=off compression=on recordsize=128K xattr=on" in result.output
    assert "recordsize=1M above this pool's maximum; using 128K" in result.output
    result = runner.invoke(storage_app, ["apply", "--config", str(config)])
    assert result.exit_code == 0, result.output
    assert "done: " in result.output
    result = runner.invoke(storage_app, ["plan", "--config", str(config)])
    assert "0 changes" in result.output


@pytest.mark.real
def test_missing_pool_is_a_clear_error(zfs_daemon, tmp_path: Path) -> None:
    config = write_config(tmp_path / "cfg", pool="nosuchpool", mountpoint=tmp_path / "srv", apps=set())
    result = CliRunner().invoke(storage_app, ["plan", "--config", str(config)])
    assert result.exit_code == 1
    assert "pool 'nosuchpool' is not available" in result.output
