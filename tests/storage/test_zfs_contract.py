"""The ZFS driver's contract: one scenario, run against the real tools (zfs-fuse) and against the fake.

What the fast tests learn from FakeZfs (sizes in bytes, inherited mountpoints and their sources, what
destroy answers for a snapshot with a clone, the errors for a duplicate or a missing dataset) is only
worth as much as this test: the same expectations hold for `ZfsCli` on a real pool.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from homelab.errors import CommandFailed
from homelab.runtime.zfs import Pool, Prop, Zfs, ZfsCli
from tests.fakes.zfs import ZFS_FUSE_TABLE, FakeZfs


def _destroy(zfs: Zfs, name: str) -> str:
    """zfs-fuse answers "busy" for a moment after a mount: wait for it to let go (generous deadline)."""
    deadline = time.monotonic() + 30
    while (outcome := zfs.destroy(name)) == "busy" and time.monotonic() < deadline:
        time.sleep(0.1)
    return outcome


def scenario(zfs: Zfs, pool: str, mount: Path) -> None:
    assert zfs.available()
    assert Pool(pool, "ONLINE") in zfs.pools()
    assert zfs.pool_properties(pool)["version"] in ("23", "-", "5000")
    table = zfs.property_table()
    assert {"compression", "recordsize", "atime", "mountpoint"} <= set(table)
    assert "lzjb" in table["compression"]

    app = f"{pool}/app"
    zfs.create(app, {"recordsize": "64K", "atime": "off"})
    zfs.create(f"{app}/db")
    assert zfs.exists(app) and not zfs.exists(f"{pool}/nothing")
    assert zfs.get(app, "recordsize") == "65536"
    props = zfs.properties([app, f"{app}/db"])
    assert props[app]["atime"] == Prop("off", "local")
    assert props[f"{app}/db"]["atime"] == Prop("off", f"inherited from {app}")
    assert props[f"{app}/db"]["mountpoint"] == Prop(f"{mount}/app/db", f"inherited from {pool}")
    assert props[f"{app}/db"]["compression"] == Prop("off", "default")
    assert zfs.mounts()[f"{app}/db"] == f"{mount}/app/db"
    zfs.set_property(app, "quota", "1G")
    assert zfs.get(app, "quota") == str(1 << 30)
    assert {pool, app, f"{app}/db"} <= set(zfs.names()) and zfs.names("filesystem") == zfs.names()

    with pytest.raises(CommandFailed, match="already exists"):
        zfs.create(app)
    with pytest.raises(CommandFailed, match="does not exist"):
        zfs.get(f"{pool}/nothing", "mountpoint")

    assert zfs.snapshot(app, "s1") == f"{app}@s1"
    zfs.snapshot(f"{app}/db", "s1")
    assert zfs.snapshots(app) == ["s1"]
    assert f"{app}@s1" in zfs.names("snapshot") and f"{app}@s1" not in zfs.names()
    zfs.create(f"{pool}/read", {"mountpoint": "none", "canmount": "off"})
    clone = f"{pool}/read/app-s1"
    zfs.clone(f"{app}@s1", clone, {"readonly": "on", "mountpoint": str(mount / "clone")})
    assert zfs.origins(f"{pool}/read") == {f"{pool}/read": None, clone: f"{app}@s1"}
    # (readonly is not checked: zfs-fuse reports it "off", source "temporary", whatever the clone was given)
    assert zfs.properties([clone])[clone]["mountpoint"] == Prop(str(mount / "clone"), "local")
    assert zfs.destroy(f"{app}@s1") == "has-clones"
    assert _destroy(zfs, clone) == "destroyed"
    assert zfs.destroy(f"{app}@s1") == "destroyed"
    assert zfs.snapshots(app) == []
    with pytest.raises(CommandFailed):
        zfs.destroy(f"{pool}/nothing")


def test_fake_keeps_the_contract(tmp_path: Path) -> None:
    fake = FakeZfs(table=ZFS_FUSE_TABLE)
    fake.add_pool("tank", tmp_path / "mnt", version="23", features={})
    scenario(fake, "tank", tmp_path / "mnt")


@pytest.mark.real
def test_zfs_cli_keeps_the_contract(make_pool: Callable[..., str], tmp_path: Path) -> None:
    mount = tmp_path / "mnt"
    pool = make_pool(mountpoint=mount)
    scenario(ZfsCli(), pool, mount)
