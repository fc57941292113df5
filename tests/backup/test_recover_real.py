"""`homelab recover` from nothing (issue 30), real programs: zfs-fuse, rclone crypt, `rclone serve sftp`.

A source server (rstudio + jenkins and the edge, on one zfs-fuse pool) with sentinels is backed up to an
sftp server; then recovered onto a fresh pool of another name and mountpoint into a fresh config folder,
and again onto plain folders: every dataset compared byte for byte (and owner, mode, mtime) with the
source's snapshot, the config files with the source's, each sentinel read back. Then what must stop with
one message and nothing started: a wrong password, a target already holding a config, the remote lost
mid-recovery (bounded, says what is done; the next recover continues), a truncated bundle, a dataset's
objects missing, no bundle at all.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from homelab.backup import context, run_backup
from homelab.backup.recover import RecoverError, Target, recover
from homelab.backup.recovery_drill import recovery_drill
from homelab.backup.snapshots import open_snapshot
from homelab.cli import app
from homelab.config.loader import load
from homelab.plan import build_plan
from homelab.project import render_project
from homelab.runtime.rclone import find_rclone
from homelab.storage import apply_storage
from tests.backup.conftest import attributes, fill, tree
from tests.backup.test_served_remotes import REMOTE_PATH, USER, Server, _remote, _serve
from tests.conftest import write_secret
from tests.storage.zfs import write_config

pytestmark = [pytest.mark.real, pytest.mark.timeout(300)]

APPS = {"rstudio", "jenkins"}
STALL = 8


def _source(make_pool, tmp_path: Path, server: Server):  # type: ignore[no-untyped-def]
    folder = tmp_path / "cfg"
    write_secret(folder / "secrets" / "served-remote-pass", server.password)
    config = write_config(
        folder,
        pool=make_pool("256M"),
        mountpoint=tmp_path / "srv",
        apps=APPS,
        remote_dir=server.root,
        backup={"remotes": {"sftp": _remote(server)}, "sentinels": True, "stall_timeout": 30},
    )
    loaded = load(config)
    plan = build_plan(loaded)
    apply_storage(plan)
    render_project(loaded)  # the generated secrets, as `homelab render` leaves them
    by_key = {d.key: Path(d.path) for d in plan.datasets}
    fill(by_key["rstudio/home"], small=40, large=1, large_size=3 << 20, sparse=1 << 20)
    fill(by_key["jenkins/home"], small=10, large=0, sparse=1 << 16, seed=2)
    return loaded, plan


def _remote_spec(server: Server) -> str:
    obscured = subprocess.run(
        [find_rclone(), "obscure", server.password], capture_output=True, text=True, check=True
    ).stdout.strip()
    options = f"host=127.0.0.1,port={server.port},user={USER},pass={obscured},shell_type=unix"
    options += f",md5sum_command=md5sum,sha1sum_command=sha1sum,known_hosts_file={server.known_hosts}"
    return f":sftp,{options}:{REMOTE_PATH}"


def _target(loaded, server: Server, config_dir: Path, **kwargs) -> Target:  # type: ignore[no-untyped-def]
    base = loaded.base_dir / "secrets"
    return Target(
        remote=_remote_spec(server),
        password=kwargs.pop("password", (base / "backup-crypt-password").read_text().strip()),
        salt=(base / "backup-crypt-salt").read_text().strip(),
        config_dir=config_dir,
        stall_timeout=STALL,
        **kwargs,
    )


def _nothing_written(config_dir: Path) -> bool:
    return not (config_dir / "homelab.yaml").exists()


def _same_as_snapshots(plan, recovered, snapshot: str, mnt: Path) -> None:  # type: ignore[no-untyped-def]
    now = {d.key: Path(d.path) for d in build_plan(recovered).datasets}
    for d in (d for d in plan.datasets if d.backup):
        with open_snapshot(d.name, snapshot, mnt) as snap:
            # the sentinel is in the snapshot: it was written before it
            assert tree(now[d.key]) == tree(snap), d.key
            assert attributes(now[d.key]) == attributes(snap), d.key


def test_recover_from_nothing_onto_another_pool_and_onto_folders(make_pool, tmp_path: Path) -> None:
    with _serve("sftp", tmp_path / "server") as server:
        loaded, plan = _source(make_pool, tmp_path, server)
        ctx = context(loaded, state_dir=tmp_path / "state")
        record = run_backup(ctx).record
        assert record.bundle == f"bundles/{record.id}.tar"

        # the recovery drill, through the backup's own remote: identical to the snapshot; in status --json
        drilled = recovery_drill(ctx)
        assert (drilled.result, drilled.bundle, drilled.datasets, drilled.sentinels) == ("success", record.id, 3, 2)
        shown = CliRunner().invoke(
            app, ["backup", "status", "--json", "--config", str(loaded.path), "--state-dir", str(tmp_path / "state")]
        )
        info = json.loads(shown.output)
        assert info["last_recovery_drill"]["result"] == "success" and info["last_good_recovery_drill_age_days"] == 0

        # wrong password: one message, nothing written
        wrong = tmp_path / "wrong"
        with pytest.raises(RecoverError, match=r"wrong crypt password or salt: none of the \d+ entries"):
            recover(_target(loaded, server, wrong, password="not-the-password"))
        assert _nothing_written(wrong)

        # onto a fresh pool of another name and mountpoint, into a fresh config folder
        pool = make_pool("256M")
        said: list[str] = []
        first = tmp_path / "new-cfg"
        target = _target(loaded, server, first, pool=pool, mountpoint=str(tmp_path / "new-srv"))
        result = recover(target, say=said.append)
        recovered = load(first / "homelab.yaml")
        assert recovered.config.storage.pool == pool
        assert recovered.config.storage.mountpoint == str(tmp_path / "new-srv")
        _same_as_snapshots(plan, recovered, record.snapshot, tmp_path / "mnt")
        for name in ("secrets/served-remote-pass", "stacks/secrets/rstudio_password"):
            assert (first / name).read_bytes() == (loaded.base_dir / name).read_bytes(), name
            assert (first / name).stat().st_mode & 0o777 == 0o600
        assert not (first / "secrets" / "backup-crypt-password").exists()  # never in the bundle
        assert sorted(s.split(":")[0] for s in result.sentinels) == ["jenkins", "rstudio"]
        assert [line.split()[0] for line in said[:3]] == ["bundle", "target", "config"]
        assert result.rto > 0 and 0 <= result.rpo < 600

        # a target that already holds a config: refused, nothing changed
        with pytest.raises(RecoverError, match=r"this machine already has a homelab config"):
            recover(target)

        # onto plain folders
        second = tmp_path / "folders-cfg"
        result = recover(_target(loaded, server, second, mountpoint=str(tmp_path / "folders"), folders=True))
        _same_as_snapshots(plan, load(second / "homelab.yaml"), record.snapshot, tmp_path / "mnt2")
        assert len(result.sentinels) == 2


def _encrypted(server: Server, loaded, path: str) -> Path:  # type: ignore[no-untyped-def]
    ctx = context(loaded, state_dir=loaded.base_dir.parent / "state")
    out = ctx.rclone.run(["cryptdecode", "--reverse", "hl-sftp-crypt:", path])
    return server.root / REMOTE_PATH / out.split("\t")[-1].strip()


def _through_server(config_dir: Path, verb: str, path: str) -> None:
    rclone_conf = config_dir / ".homelab-recover" / "private" / "rclone.conf"
    argv = [find_rclone(), "--config", str(rclone_conf), verb, f"hl-recover-crypt:{path}"]
    subprocess.run(argv, check=True, capture_output=True)


def test_a_lost_remote_a_truncated_bundle_missing_objects_no_bundle(make_pool, tmp_path: Path) -> None:
    work = tmp_path / "server"
    with _serve("sftp", work) as server:
        loaded, _ = _source(make_pool, tmp_path, server)
        record = run_backup(context(loaded, state_dir=tmp_path / "state")).record
        config_dir = tmp_path / "new-cfg"
        target = _target(loaded, server, config_dir, mountpoint=str(tmp_path / "new-srv"), folders=True)

        # the server frozen while the first dataset is restored: ends within a bound, says what is done
        def freeze_when_restoring() -> None:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not list((tmp_path / "new-srv").glob("*/*/.homelab-recover-*")):
                time.sleep(0.02)
            os.kill(server.pid, signal.SIGSTOP)

        watcher = threading.Thread(target=freeze_when_restoring, daemon=True)
        watcher.start()
        began = time.monotonic()
        with pytest.raises(RecoverError) as stopped:
            recover(target)
        took = time.monotonic() - began
        watcher.join()
        os.kill(server.pid, signal.SIGKILL)
        assert took < 8 * STALL + 60, took
        message = str(stopped.value)
        assert "recovery stopped, nothing started" in message and "not restored:" in message
        assert "run `homelab recover` again" in message
    # a new server on the same folder (a new port): the second recover continues and completes
    with _serve("sftp", work) as server:
        said: list[str] = []
        result = recover(
            _target(loaded, server, config_dir, mountpoint=str(tmp_path / "new-srv"), folders=True), say=said.append
        )
        assert result.run == record.id
        assert "continuing" in said[1]
        assert len(result.sentinels) == 2

        # a dataset's objects missing: stops before any dataset is created. Deleted through the server (its
        # listing cache would not see a file removed from its disk), with the recovery's own rclone config
        _through_server(config_dir, "deletefile", "current/rstudio/home/plaincanary.txt")
        other = tmp_path / "other-cfg"
        with pytest.raises(RecoverError, match=r"dataset rstudio/home: 1 objects missing on the remote"):
            recover(_target(loaded, server, other, mountpoint=str(tmp_path / "other-srv"), folders=True))
        assert not (tmp_path / "other-srv").exists()

        # a truncated bundle
        bundle = _encrypted(server, loaded, record.bundle or "")
        data = bundle.read_bytes()
        bundle.write_bytes(data[: len(data) // 2])
        third = tmp_path / "third-cfg"
        with pytest.raises(RecoverError, match=r"bundle bundles/\S+ could not be read \(truncated or damaged\?\)"):
            recover(_target(loaded, server, third, folders=True))
        assert _nothing_written(third)

        # no bundle at all (backups from before bundles existed)
        _through_server(config_dir, "purge", "bundles")
        with pytest.raises(RecoverError, match=r"no recovery bundle on .*: only dataset backups"):
            recover(_target(loaded, server, third, folders=True))
        assert _nothing_written(third)
