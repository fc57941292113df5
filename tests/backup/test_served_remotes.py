"""Backups to network remotes (issue 5): `rclone serve sftp` and `rclone serve webdav` on 127.0.0.1.

Each server is the venv's rclone serving a temp folder with a user and password; homelab's remote of type
sftp / webdav reads the password from a 0600 secret file. One run, a restore compared by sha256 with the
snapshot, a clean verify, then one flipped byte in one served object that verify names; the served folder
holds nothing plaintext and the password shows up nowhere homelab writes or says.

What each remote needs for cryptcheck to compare hashes:
- sftp: nothing; rclone's sftp client finds the md5sum/sha1sum commands `rclone serve sftp` answers (set
  explicitly here: shell_type, md5sum_command, sha1sum_command). known_hosts_file pins the server's keys.
- webdav: the server must publish checksums (`rclone serve webdav --etag-hash MD5`, sent as oc:checksums)
  and the client must read them (`vendor: owncloud`; `vendor: rclone`/`other` declare no hash, and
  cryptcheck then refuses: "does not support any hashes"). Without the server flag every hash is empty:
  rclone's cryptcheck exits 0 with "N hashes could not be checked", which homelab treats as a failure.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import secrets
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from homelab.backup import BackupError, context, restore, run_backup, verify
from homelab.backup.snapshots import open_snapshot
from homelab.config.loader import load
from homelab.plan import build_plan
from homelab.runtime.rclone import find_rclone
from homelab.storage import apply_storage
from tests.backup.conftest import CANARY, KEY, UNICODE_NAMES, Lab, assert_links_and_holes, attributes, fill, tree
from tests.conftest import write_secret
from tests.storage.zfs import write_config

pytestmark = [pytest.mark.real, pytest.mark.timeout(180)]  # a stuck server fails the test, never hangs the suite

USER = "homelab-backup"
REMOTE_PATH = "backups/homelab"  # relative to the served folder
VICTIM = "plaindir-03/plainsub-3/plainfile-00003.txt"
ADDRESS = re.compile(r"(?:listening on |started on \[https?://)(127\.0\.0\.1):(\d+)")


@dataclass
class Server:
    kind: str  # sftp | webdav
    root: Path  # the served folder
    port: int
    password: str
    log: Path
    pid: int
    known_hosts: Path | None = None


@contextlib.contextmanager
def _serve(kind: str, work: Path, *, etag_hash: bool = True) -> Iterator[Server]:
    """`rclone serve KIND` on 127.0.0.1 (a free port chosen by the kernel) with a user and password. Served
    again from the same `work` (a server restarted): the same folder, host keys and password, a new port."""
    root, cache, log = work / "served", work / "server-cache", work / "server.log"
    root.mkdir(parents=True, exist_ok=True)
    secret = work / "server-password"
    if not secret.exists():
        secret.write_text("pw-" + secrets.token_urlsafe(18))
    password = secret.read_text()
    argv = [find_rclone(), "--config", "/dev/null", "--cache-dir", str(cache), "serve", kind, str(root)]
    argv += ["--addr", "127.0.0.1:0", "-v"]
    if kind == "sftp":
        argv += ["--authorized-keys", str(work / "no-authorized-keys")]  # password only; not ~/.ssh
    if kind == "webdav" and etag_hash:
        argv += ["--etag-hash", "MD5"]  # publish MD5 as oc:checksums: without it no hash reaches the client
    # user and password from the environment (RCLONE_USER/RCLONE_PASS), not the command line (ps)
    env = {**os.environ, "RCLONE_USER": USER, "RCLONE_PASS": password}
    with log.open("w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        port = _wait_listening(proc, log)
        server = Server(kind, root, port, password, log, proc.pid)
        if kind == "sftp":  # pin every host key the server offers
            server.known_hosts = work / "known_hosts"
            keys = sorted((cache / "serve-sftp").glob("*.pub"))
            assert keys, f"no host keys in {cache}"
            server.known_hosts.write_text("".join(f"[127.0.0.1]:{port} {k.read_text().strip()}\n" for k in keys))
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def _wait_listening(proc: subprocess.Popen, log: Path, timeout: float = 20) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"rclone serve exited with {proc.returncode}: {log.read_text()[-800:]}")
        found = ADDRESS.search(log.read_text(errors="replace"))
        if found:
            host, port = found.group(1), int(found.group(2))
            with socket.create_connection((host, port), timeout=2):
                return port
        time.sleep(0.05)
    pytest.fail(f"rclone serve did not listen within {timeout}s: {log.read_text()[-800:]}")


def _remote(server: Server) -> dict:
    """homelab.yaml backup.remotes entry for the server; the password comes from a secret file."""
    if server.kind == "sftp":
        options = {
            "host": "127.0.0.1",
            "port": str(server.port),
            "user": USER,
            "known_hosts_file": str(server.known_hosts),
            "shell_type": "unix",
            "md5sum_command": "md5sum",
            "sha1sum_command": "sha1sum",
        }
    else:
        options = {"url": f"http://127.0.0.1:{server.port}/", "vendor": "owncloud", "user": USER}
    return {
        "type": server.kind,
        "path": REMOTE_PATH,
        "options": options,
        "secret_options": {"pass": "secrets/served-remote-pass"},
    }


def served_config(tmp_path: Path, pool: str, server: Server, backup: dict | None = None) -> Path:
    """homelab.yaml (in tmp_path/cfg) with the served remote as the only backup remote."""
    folder = tmp_path / "cfg"
    write_secret(folder / "secrets" / "served-remote-pass", server.password)
    return write_config(
        folder,
        pool=pool,
        mountpoint=tmp_path / "srv",
        apps={"rstudio"},
        remote_dir=server.root,  # replaced by the remotes below
        backup={"datasets": [KEY], "remotes": {server.kind: _remote(server)}, **(backup or {})},
    )


def _lab(make_pool, tmp_path: Path, server: Server, backup: dict | None = None) -> Lab:
    """Like tests.backup.conftest.make_lab, with the served remote as the only backup remote."""
    config = served_config(tmp_path, make_pool("192M"), server, backup)
    loaded = load(config)
    plan = build_plan(loaded)
    apply_storage(plan)
    (d,) = [d for d in plan.datasets if d.key == KEY]
    return Lab(loaded, config, Path(d.path), d.name, server.root / REMOTE_PATH, tmp_path / "state")


@pytest.fixture(params=["sftp", "webdav"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Server]:
    with _serve(request.param, tmp_path / "server") as served:
        yield served


def _encrypted(ctx, server: Server, name: str) -> str:
    """The object name (relative to the remote's path) of current/KEY/NAME."""
    path = f"current/{KEY}/{name}".rstrip("/")
    out = ctx.rclone.run(["cryptdecode", "--reverse", f"hl-{server.kind}-crypt:", path])
    return out.split("\t")[-1].strip()


def _flip_one_byte(path: Path) -> None:
    """One byte changed past the crypt header, same size. The mtime changes with the write, as it must here:
    the server's VFS keeps the MD5 it computed on upload while it caches the folder (--dir-cache-time, 5 min)
    and serves it again as long as size and mtime are unchanged."""
    data = bytearray(path.read_bytes())
    data[len(data) // 2 + 20] ^= 0x01
    path.write_bytes(bytes(data))


def test_backup_restore_verify_on_served_remote(
    server: Server, make_pool, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)  # every command homelab runs is logged at debug: none may show the password
    lab = _lab(make_pool, tmp_path, server)
    fill(lab.data, small=50, large=0, sparse=1 << 20)
    said: list[str] = []
    ctx = context(lab.loaded, state_dir=lab.state)

    record = run_backup(ctx, say=said.append).record
    assert record.result == "success", record
    (entry,) = record.datasets
    assert entry.remote == server.kind
    assert entry.transferred_files == entry.checked_files == entry.files > 50

    # restore into an empty folder: the same sha256 tree as the snapshot (files, sparse, links, unicode)
    with open_snapshot(lab.dataset, record.snapshot, tmp_path / "mnt") as snap:
        expected, expected_attributes = tree(snap), attributes(snap)
    restored = tmp_path / "restored"
    restore(ctx, KEY, restored)
    assert tree(restored) == expected
    assert attributes(restored) == expected_attributes  # owners, modes, mtimes (homelab's own listing)
    assert_links_and_holes(restored)
    assert expected["plainlink-relative"] == "link:plaincanary.txt" and UNICODE_NAMES[1] in expected

    # verify: every object cryptchecked by hash against the snapshot
    clean = verify(ctx, say=said.append)
    assert clean.result == "success" and clean.checked == entry.files, clean
    check_log = (ctx.state.logs / f"verify-{server.kind}-rstudio_home.log").read_text()
    assert "hashes could not be checked" not in check_log and "Using md5 for hash comparisons" in check_log

    # the served folder holds no plaintext: not a name, not the canary
    served = list(server.root.rglob("*"))
    assert len([p for p in (lab.remote / _encrypted(ctx, server, "")).rglob("*") if p.is_file()]) == entry.files
    names = [str(p.relative_to(server.root)) for p in served]
    for needle in ["plain", "canary", *UNICODE_NAMES, "日本語"]:
        assert not any(needle.lower() in n.lower() for n in names), needle
    for path in served:
        if path.is_file():
            data = path.read_bytes()
            assert CANARY not in data and b"secret notes" not in data and b"plainfile" not in data, path

    # one flipped byte in one served object: verify fails and names exactly that file
    _flip_one_byte(lab.remote / _encrypted(ctx, server, VICTIM))
    with pytest.raises(BackupError) as failed:
        verify(ctx, say=said.append)
    problems = [line.strip() for line in str(failed.value).splitlines()[1:]]
    assert problems == [f"{KEY} -> {server.kind}: differs: {VICTIM}"], str(failed.value)

    # the remote's password: obscured in the config, nowhere in what homelab wrote, logged or said
    conf = ctx.rclone.config_path.read_text()
    (obscured,) = re.findall(rf"^\[hl-{server.kind}\]\n(?:.+\n)*?pass = (\S+)$", conf, re.MULTILINE)
    assert server.password not in conf and obscured != server.password
    written = {p: p.read_bytes() for p in lab.state.rglob("*") if p.is_file() and p != ctx.rclone.config_path}
    assert any(p.suffix == ".log" for p in written)
    for needle in (server.password, obscured):
        assert not [p for p, data in written.items() if needle.encode() in data], needle
        assert needle not in caplog.text and needle not in "\n".join(said) and needle not in str(failed.value)
    assert server.password not in server.log.read_text(errors="replace")


def test_webdav_without_server_hashes_fails_instead_of_passing(make_pool, tmp_path: Path) -> None:
    """A webdav server that publishes no checksums: rclone's cryptcheck would exit 0 having compared
    nothing ("N hashes could not be checked"); homelab's run must fail and say why."""
    with _serve("webdav", tmp_path / "server", etag_hash=False) as server:
        lab = _lab(make_pool, tmp_path, server)
        fill(lab.data, small=5, large=0, sparse=1 << 16)
        ctx = context(lab.loaded, state_dir=lab.state)
        with pytest.raises(BackupError, match=r"cryptcheck: .*: \d+ hashes could not be checked \(the remote gave no"):
            run_backup(ctx)
        last = ctx.state.runs()[-1]
        assert last.result == "failed" and not (lab.state / "webdav.last_success").exists(), last
