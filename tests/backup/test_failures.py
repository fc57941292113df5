"""What goes wrong, and how a backup says so: kill -9 mid-run, a flipped byte, a deleted object, a full remote."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from homelab.backup import BackupError, context, restore, run_backup, verify
from homelab.backup.snapshots import open_snapshot
from tests.backup.conftest import KEY, Lab, cli_argv, fill, make_lab, tree

pytestmark = pytest.mark.real


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return found


def _rclone_sync_pid(pid: int) -> int | None:
    for child in _children(pid):
        try:
            cmd = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if cmd and cmd[0].endswith(b"rclone") and b"sync" in cmd:
            return child
    return None


def _remote_bytes(remote: Path) -> int:
    return sum(p.stat().st_size for p in remote.rglob("*") if p.is_file())


def _cli(lab: Lab, *args: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        cli_argv(lab, *args),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **(env or {})},
    )


def test_kill_9_at_10_50_90_percent_then_a_clean_run(lab, tmp_path: Path) -> None:
    fill(lab.data, small=20, large=24, large_size=1 << 20, sparse=1 << 20)
    total = sum(p.stat().st_size for p in lab.data.rglob("*") if p.is_file() and not p.is_symlink())
    for share in (0.10, 0.50, 0.90):
        proc = _cli(lab, "run", env={"RCLONE_BWLIMIT": "6M", "RCLONE_TRANSFERS": "2"})
        deadline = time.monotonic() + 120
        killed = False
        while proc.poll() is None and time.monotonic() < deadline:
            pid = _rclone_sync_pid(proc.pid)
            if pid and _remote_bytes(lab.remote) >= share * total:
                os.kill(pid, signal.SIGKILL)
                killed = True
                break
            time.sleep(0.05)
        out, _ = proc.communicate(timeout=120)
        assert killed, f"never reached {share:.0%}: {out}"
        assert proc.returncode == 1, out
        assert "killed (signal 9)" in out, out
        assert "success" not in out.split("backup failed")[-1]
    proc = _cli(lab, "run")
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out
    ctx = context(lab.loaded, state_dir=lab.state)
    names = ctx.rclone.list_files("hl-offsite-crypt:", recursive=True)
    assert not [n for n in names if n.endswith(".partial")]
    encrypted = [p for p in lab.remote.rglob("*") if p.is_file()]
    assert len(encrypted) == len(names)  # every object decrypts to a name: nothing unreadable left behind
    assert verify(ctx).result == "success"  # cryptcheck of everything is clean
    last = ctx.state.runs()[-1]
    with open_snapshot(lab.dataset, last.snapshot, tmp_path / "mnt") as snap:
        expected = tree(snap)
    restore(ctx, KEY, tmp_path / "restored")
    assert tree(tmp_path / "restored") == expected


def _encrypted(ctx, name: str) -> str:
    out = ctx.rclone.run(["cryptdecode", "--reverse", "hl-offsite-crypt:", f"current/{KEY}/{name}"])
    return out.strip().split("\t")[-1].strip()


def test_flipped_byte_and_deleted_object_are_named_then_repaired(lab, tmp_path: Path) -> None:
    fill(lab.data, small=30, large=0, sparse=1 << 20)
    ctx = context(lab.loaded, state_dir=lab.state)
    run_backup(ctx)
    victim = "plaindir-03/plainsub-3/plainfile-00003.txt"
    gone = "plaindir-04/plainsub-4/plainfile-00004.txt"
    blob = lab.remote / _encrypted(ctx, victim)
    data = bytearray(blob.read_bytes())
    data[len(data) // 2 + 20] ^= 0x01
    blob.write_bytes(bytes(data))
    (lab.remote / _encrypted(ctx, gone)).unlink()

    proc = _cli(lab, "verify")
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 1, out
    problems = [
        line.strip() for line in out.splitlines() if "rstudio/home -> offsite:" in line and "FAILED" not in line
    ]
    assert problems == [
        f"rstudio/home -> offsite: differs: {victim}",
        f"rstudio/home -> offsite: missing on the remote: {gone}",
    ], out

    # the next run uploads both again; then verify passes and a restore is the snapshot
    said: list[str] = []
    record = run_backup(ctx, say=said.append).record
    assert any(line.startswith("repair  rstudio/home -> offsite: 2 objects") for line in said), said
    assert verify(ctx).result == "success"
    # a rewrite with the same size and mtime: a plain run cannot see it, `run --deep` does
    canary = lab.data / "plaincanary.txt"
    st = canary.stat()
    canary.write_bytes(canary.read_bytes().upper())
    os.utime(canary, ns=(st.st_atime_ns, st.st_mtime_ns))
    record = run_backup(ctx, deep=True).record
    with open_snapshot(lab.dataset, record.snapshot, tmp_path / "mnt") as snap:
        expected = tree(snap)
    restore(ctx, KEY, tmp_path / "restored")
    assert tree(tmp_path / "restored") == expected
    assert (tmp_path / "restored" / "plaincanary.txt").read_bytes() == canary.read_bytes()


@pytest.fixture
def full_remote(tmp_path: Path):
    mount = tmp_path / "small-remote"
    mount.mkdir()
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mount)], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {proc.stderr.strip()}")  # loop mount needs the same
    yield mount
    subprocess.run(["umount", str(mount)], check=False)


def test_full_remote_fails_naming_enospc(make_pool, tmp_path: Path, full_remote: Path) -> None:
    lab = make_lab(make_pool, tmp_path, remote=full_remote)
    fill(lab.data, small=10, large=3, large_size=2 << 20, sparse=1 << 20)
    proc = _cli(lab, "run")
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 1, out
    assert "ENOSPC" in out and "backup failed" in out, out
    ctx = context(lab.loaded, state_dir=lab.state)
    assert ctx.state.runs()[-1].result == "failed"
    assert not (lab.state / "offsite.last_success").exists()
    status = _cli(lab, "status")
    text, _ = status.communicate(timeout=60)
    assert status.returncode == 1 and "failed" in text
    with pytest.raises(BackupError):
        verify(ctx)  # no successful backup to check against


def test_a_clone_in_use_by_another_reader_does_not_fail_the_next_run(lab, tmp_path: Path) -> None:
    fill(lab.data, small=10, large=0, sparse=1 << 20)
    ctx = context(lab.loaded, state_dir=lab.state)
    first = run_backup(ctx).record
    # a verify or drill of the last snapshot is reading its clone right now (zfs-fuse has no .zfs dir)
    with open_snapshot(lab.dataset, first.snapshot, tmp_path / "mnt") as snap, (snap / "plaincanary.txt").open("rb"):
        assert run_backup(ctx).record.result == "success"
        assert (snap / "plaincanary.txt").exists()  # left alone, not destroyed under the reader
