"""storage plan/apply against the in-memory ZFS (tests/storage has the same against zfs-fuse)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from homelab import memory, storage
from homelab.cli.storage import storage_app
from homelab.config.loader import load
from homelab.errors import CommandFailed
from homelab.plan import build_plan
from homelab.plan_model import Plan
from homelab.storage import PoolSupport, StorageError, apply_storage, plan_storage, probe
from tests.fakes.zfs import ZFS_FUSE_TABLE, FakeZfs
from tests.storage.zfs import write_config


def _plan(tmp_path: Path, apps: set[str], datasets: dict | None = None) -> Plan:
    mount = tmp_path / "srv"
    extra = {"storage": {"pool": "tank", "root": "tank/homelab", "mountpoint": str(mount), "datasets": datasets or {}}}
    return build_plan(load(write_config(tmp_path / "cfg", pool="tank", mountpoint=mount, apps=apps, extra=extra)))


def _openzfs(tmp_path: Path) -> FakeZfs:
    zfs = FakeZfs(mount_root=tmp_path)
    zfs.add_pool("tank", tmp_path / "pool")
    return zfs


def _zfs_fuse(tmp_path: Path) -> FakeZfs:
    zfs = FakeZfs(table=ZFS_FUSE_TABLE, mount_root=tmp_path)
    zfs.add_pool("tank", tmp_path / "pool", version="23", features={})
    return zfs


@pytest.fixture
def chowned(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int, int]]:
    """os.chown recorded, not done (the tests need not run as root)."""
    calls: list[tuple[str, int, int]] = []
    monkeypatch.setattr(storage.os, "chown", lambda path, uid, gid: calls.append((str(path), uid, gid)))
    return calls


def test_openzfs_pool_gets_every_property_and_one_create_per_dataset(tmp_path: Path, chowned: list) -> None:
    plan = _plan(tmp_path, {"plex"})
    zfs = _openzfs(tmp_path)
    planned = plan_storage(plan, zfs=zfs)
    assert planned.warnings == []
    assert zfs.changes() == []  # planning changes nothing
    mount = tmp_path / "srv"
    assert [str(s) for s in planned.steps[:3]] == [
        f"create tank/homelab: mountpoint={mount} acltype=posix atime=off compression=lz4 xattr=sa",
        "create tank/homelab/edge",
        "create tank/homelab/plex",
    ]
    apply_storage(plan, planned, zfs=zfs)
    creates = [c for c in zfs.changes() if c[0] == "create"]
    assert creates[0] == (
        "create",
        "tank/homelab",
        f"mountpoint={mount}",
        "acltype=posix",
        "atime=off",
        "compression=lz4",
        "xattr=sa",
    )
    assert (
        "create",
        "tank/homelab/plex/media",
        "acltype=posix",
        "atime=off",
        "compression=lz4",
        "recordsize=1M",
        "xattr=sa",
    ) in creates
    assert zfs.get("tank/homelab/plex/media", "recordsize") == str(1 << 20)
    assert zfs.get("tank/homelab/plex/media", "mountpoint") == f"{mount}/plex/media"
    assert (f"{mount}/plex/media", 1000, 1000) in chowned and (f"{mount}/edge/acme", 0, 0) in chowned
    acme = mount / "edge" / "acme" / "acme.json"
    assert stat.S_IMODE(acme.lstat().st_mode) == 0o600 and acme.read_bytes() == b""


def test_parents_are_created_before_children(tmp_path: Path, chowned: list) -> None:
    plan = _plan(tmp_path, {"plex", "gitea"})
    zfs = _openzfs(tmp_path)
    apply_storage(plan, zfs=zfs)  # the fake refuses a create whose parent is missing
    names = [c[1] for c in zfs.changes() if c[0] == "create"]
    assert names.index("tank/homelab") == 0
    assert names.index("tank/homelab/gitea") < names.index("tank/homelab/gitea/data")


def test_zfs_fuse_pool_falls_back_and_says_each_fallback_once(tmp_path: Path) -> None:
    plan = _plan(tmp_path, {"plex"})
    planned = plan_storage(plan, zfs=_zfs_fuse(tmp_path))
    warned = [str(s) for s in planned.steps if s.action == "warn"]
    assert warned == [
        "warn   tank/homelab: compression=lz4 not supported by pool tank; using on",
        "warn   tank/homelab: xattr=sa not supported by pool tank; using xattr=on (directory xattrs)",
        "warn   tank/homelab: acltype is not a property this zfs knows; skipped",
        "warn   tank/homelab/plex/media: recordsize=1M above this pool's maximum; using 128K",
    ]
    assert "tank/homelab/plex/config: compression=lz4 not supported by pool tank; using on" in planned.warnings
    media = next(s for s in planned.steps if s.action == "create" and s.target == "tank/homelab/plex/media")
    assert media.properties == {"atime": "off", "compression": "on", "recordsize": "128K", "xattr": "on"}


def test_second_plan_after_apply_changes_nothing(tmp_path: Path) -> None:
    plan = _plan(tmp_path, {"gitea"})
    if os.geteuid() != 0:
        pytest.skip("chown needs root")  # CI runs as root
    zfs = _openzfs(tmp_path)
    apply_storage(plan, zfs=zfs)
    again = plan_storage(plan, zfs=zfs)
    assert again.changes == []
    assert [str(s) for s in again.steps if s.action == "ok"][:2] == [
        "ok     tank/homelab: exists",
        "ok     tank/homelab/edge: exists",
    ]


def test_existing_datasets_are_adjusted_never_shrunk_or_recreated(tmp_path: Path, chowned: list) -> None:
    plan = _plan(tmp_path, {"gitea"}, {"gitea/config": {"properties": {"quota": "1M", "casesensitivity": "mixed"}}})
    zfs = _openzfs(tmp_path)
    zfs.create("tank/homelab", {"mountpoint": str(tmp_path / "srv")})
    zfs.create("tank/homelab/gitea")
    zfs.create("tank/homelab/gitea/data", {"recordsize": "128K", "atime": "on", "mountpoint": str(tmp_path / "old")})
    zfs.create("tank/homelab/gitea/config", {"quota": "100M"})
    zfs.calls.clear()
    planned = plan_storage(plan, zfs=zfs)
    text = [str(s) for s in planned.steps]
    assert "set    tank/homelab/gitea/data: atime on -> off" in text
    assert "set    tank/homelab/gitea/data: recordsize 128K -> 64K (applies to files written from now on)" in text
    assert (
        f"warn   tank/homelab/gitea/data: mounted at {tmp_path / 'old'}, the plan expects "
        f"{tmp_path / 'srv'}/gitea/data; not changed (bind mounts use {tmp_path / 'srv'}/gitea/data)"
    ) in text
    assert (
        "warn   tank/homelab/gitea/config: quota would shrink from 100M to 1M; apply never shrinks "
        "(run zfs set yourself if you mean it)"
    ) in text
    assert (
        "warn   tank/homelab/gitea/config: casesensitivity is sensitive, wanted mixed: only settable at creation; "
        "left as is"
    ) in text
    assert not any(s.action == "create" and "gitea/" in s.target for s in planned.steps)
    apply_storage(plan, planned, zfs=zfs)
    sets = [c for c in zfs.changes() if c[0] == "set_property"]
    assert ("set_property", "tank/homelab/gitea/data", "recordsize", "64K") in sets
    assert not any(c[1] == "tank/homelab/gitea/config" and c[2] in ("quota", "casesensitivity") for c in sets)
    assert zfs.get("tank/homelab/gitea/config", "quota") == str(100 << 20)


def test_a_dataset_already_as_planned_is_ok(tmp_path: Path) -> None:
    plan = _plan(tmp_path, set())
    zfs = _openzfs(tmp_path)
    acme = next(d for d in plan.datasets if d.key == "edge/acme")
    zfs.create("tank/homelab", {"mountpoint": str(tmp_path / "srv"), **acme.properties})
    zfs.create("tank/homelab/edge")
    zfs.create(acme.name)
    steps = {(s.action, s.target): s.detail for s in plan_storage(plan, zfs=zfs).steps}
    assert steps[("ok", acme.name)] == "properties as planned"


def test_acme_json_that_is_a_folder_is_a_warning_then_an_error(tmp_path: Path, chowned: list) -> None:
    plan = _plan(tmp_path, set())
    zfs = _openzfs(tmp_path)
    acme = tmp_path / "srv" / "edge" / "acme" / "acme.json"
    acme.mkdir(parents=True)
    planned = plan_storage(plan, zfs=zfs)
    assert [s.detail for s in planned.steps if s.target == str(acme)] == [
        "is not a regular file (Docker creates a directory for a missing bind source); remove it and run apply again"
    ]
    acme.rmdir()
    planned = plan_storage(plan, zfs=zfs)
    acme.mkdir()  # appears between plan and apply
    with pytest.raises(StorageError, match=r"^acme .*acme.json failed: .*is not a regular file"):
        apply_storage(plan, planned, zfs=zfs)


def test_acme_json_with_a_loose_mode_is_tightened(tmp_path: Path, chowned: list) -> None:
    plan = _plan(tmp_path, set())
    acme = tmp_path / "srv" / "edge" / "acme" / "acme.json"
    acme.parent.mkdir(parents=True)
    acme.write_text('{"le": {}}')
    acme.chmod(0o644)
    zfs = _openzfs(tmp_path)
    planned = plan_storage(plan, zfs=zfs)
    assert [str(s) for s in planned.steps if s.action == "acme"] == [f"acme   {acme}: mode 0644 -> 0600"]
    apply_storage(plan, planned, zfs=zfs)
    assert stat.S_IMODE(acme.stat().st_mode) == 0o600 and acme.read_text() == '{"le": {}}'


def test_a_failing_zfs_command_stops_apply_naming_the_step(tmp_path: Path, chowned: list) -> None:
    plan = _plan(tmp_path, set())
    zfs = _openzfs(tmp_path)
    zfs.fail["create"] = CommandFailed(["zfs", "create", "tank/homelab"], 1, "", "cannot create: permission denied")
    reported: list = []
    with pytest.raises(StorageError) as caught:
        apply_storage(plan, zfs=zfs, report=reported.append)
    assert str(caught.value).splitlines() == [
        "create tank/homelab failed: command failed (exit 1): zfs create tank/homelab",
        "  cannot create: permission denied",
    ]
    assert reported == []


def test_a_failing_chown_stops_apply_naming_the_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plan = _plan(tmp_path, set())

    def refuse(path: str, uid: int, gid: int) -> None:
        raise PermissionError(1, "Operation not permitted", path)

    monkeypatch.setattr(storage.os, "chown", refuse)
    path = tmp_path / "srv" / "edge" / "acme"
    with pytest.raises(StorageError, match=rf"^chown {path} failed: Operation not permitted \({path}\)$"):
        apply_storage(plan, zfs=_openzfs(tmp_path))


def test_no_zfs_listing_means_nothing_exists_yet(tmp_path: Path) -> None:
    plan = _plan(tmp_path, set())
    zfs = _openzfs(tmp_path)
    zfs.fail["names"] = CommandFailed(["zfs", "list"], 1, "", "no datasets available")
    assert {s.action for s in plan_storage(plan, zfs=zfs).steps} >= {"create"}


def test_probe_reads_pool_version_features_and_table(tmp_path: Path) -> None:
    support = probe("tank", _zfs_fuse(tmp_path))
    assert (support.version, support.max_recordsize, support.feature_flags) == ("23", 128 << 10, False)
    support = probe("tank", _openzfs(tmp_path))
    assert (support.version, support.max_recordsize, support.feature_flags) == ("-", 16 << 20, True)


def test_probe_of_a_missing_pool_or_an_empty_table_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match=r"^pool 'data' is not available: cannot open 'data': no such pool$"):
        probe("data", _openzfs(tmp_path))
    silent = FakeZfs(table={})
    silent.add_pool("tank")
    with pytest.raises(StorageError, match="could not read the zfs property table"):
        probe("tank", silent)
    mute = _openzfs(tmp_path)
    mute.fail["pool_properties"] = CommandFailed(["zpool", "get", "all", "tank"], 1, "", "")
    with pytest.raises(StorageError, match=r"^pool 'tank' is not available: zpool get failed$"):
        probe("tank", mute)


@pytest.mark.parametrize(
    ("name", "value", "ok"),
    [
        ("compression", "gzip-7", True),
        ("compression", "gzip-x", False),
        ("compression", "zstd-3", True),
        ("quota", "10G", True),
        ("recordsize", "banana", False),
        ("recordsize", "2M", False),
        ("org.homelab:note", "anything", True),
        ("mountpoint", "/srv/x", True),
        ("logbias", "sometimes", False),
        ("nosuchprop", "on", False),
    ],
)
def test_supports_value(name: str, value: str, ok: bool) -> None:
    from tests.fakes.zfs import OPENZFS_FEATURES, OPENZFS_TABLE

    support = PoolSupport("tank", "-", OPENZFS_TABLE, OPENZFS_FEATURES, 1 << 20)
    assert support.supports_value(name, value) is ok


def test_fit_without_any_compression_leaves_it_unset() -> None:
    support = PoolSupport("tank", "28", {"compression": "off | lzjb"}, {})
    assert storage.fit({"compression": "lz4", "logbias": "throughput"}, support) == (
        {},
        [
            "compression=lz4 not supported by pool tank; left unset",
            "logbias is not a property this zfs knows; skipped",
        ],
    )
    support = PoolSupport("tank", "28", {"logbias": "latency | throughput"}, {})
    assert storage.fit({"logbias": "fast"}, support) == ({}, ["logbias=fast not supported by pool tank; skipped"])


def test_sizes() -> None:
    assert storage.parse_size("1.5K") == 1536 and storage.parse_size("16 MiB") == 16 << 20
    assert storage.format_size(64 << 10) == "64K" and storage.format_size(1000) == "1000"
    with pytest.raises(ValueError, match="not a size"):
        storage.parse_size("lots")


def test_cli_plan_and_apply_on_the_fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chowned: list) -> None:
    zfs = _zfs_fuse(tmp_path)
    monkeypatch.setattr(storage, "ZfsCli", lambda: zfs)
    monkeypatch.setattr(memory, "HOST_ROOT", tmp_path / "host")  # never this machine's ZFS ARC
    config = tmp_path / "cfg" / "homelab.yaml"
    _plan(tmp_path, {"plex"})
    runner = CliRunner()
    result = runner.invoke(storage_app, ["plan", "--config", str(config)])
    assert result.exit_code == 0, result.output
    assert "  create tank/homelab/plex/media: atime=off compression=on recordsize=128K xattr=on\n" in result.output
    # 4 datasets (edge/acme, plex/*) + root + 2 owner folders = 7 creates, 4 chowns, acme.json;
    # compression, xattr, acltype for the root and each dataset, and media's recordsize
    assert result.output.endswith("\n12 changes, 16 warnings (pool tank version 23)\n")
    result = runner.invoke(storage_app, ["apply", "--config", str(config)])
    assert result.exit_code == 0, result.output
    assert f"  create tank/homelab: mountpoint={tmp_path / 'srv'} atime=off compression=on xattr=on\n" in result.output
    assert result.output.endswith("\ndone: 12 changes, 16 warnings\n")


def test_cli_caps_the_zfs_arc_from_the_budget(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chowned: list) -> None:
    """storage plan shows and storage apply sets zfs_arc_max: what the reservations leave of this machine's
    RAM (docs/resources.md); skipped without the OpenZFS module (zfs-fuse)."""
    monkeypatch.setattr(storage, "ZfsCli", lambda: _zfs_fuse(tmp_path))
    monkeypatch.setattr(memory, "HOST_ROOT", tmp_path / "host")
    config = tmp_path / "cfg" / "homelab.yaml"
    _plan(tmp_path, {"plex"})
    runner = CliRunner()
    result = runner.invoke(storage_app, ["plan", "--config", str(config)])
    assert "  skip   zfs_arc_max " in result.output and "no OpenZFS kernel module loaded" in result.output
    parameter = tmp_path / "host" / memory.PARAMETER
    parameter.parent.mkdir(parents=True)
    parameter.write_text("0\n")
    arc_max = memory.host_budget(build_plan(load(config))).arc_max
    assert f"  set    zfs_arc_max {arc_max} " in runner.invoke(storage_app, ["plan", "--config", str(config)]).output
    result = runner.invoke(storage_app, ["apply", "--config", str(config)])
    assert result.exit_code == 0, result.output
    assert f"  set    zfs_arc_max={arc_max} live\n" in result.output and parameter.read_text() == f"{arc_max}\n"
