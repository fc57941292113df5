"""A small homelab (edge + rstudio) on a real zfs-fuse pool, backed up to a local-dir crypt remote."""

from __future__ import annotations

import hashlib
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from homelab.config.loaded import LoadedConfig
from homelab.config.loader import load
from homelab.plan import build_plan
from homelab.storage import apply_storage
from tests.storage.zfs import make_pool, write_config, zfs_daemon  # noqa: F401 - fixtures

CANARY = b"CANARY-5f0c2e7b-homelab-plaintext-marker"
KEY = "rstudio/home"
UNICODE_NAMES = ["plainunicode-Æøå-ünïcödé.txt", "plainunicode-日本語のファイル.txt", "plainunicode-emoji-😀.md"]


@dataclass
class Lab:
    loaded: LoadedConfig
    config: Path
    data: Path  # mountpoint of rstudio/home
    dataset: str
    remote: Path
    state: Path


@pytest.fixture
def lab(make_pool, tmp_path: Path) -> Lab:
    return make_lab(make_pool, tmp_path)


def make_lab(make_pool, tmp_path: Path, remote: Path | None = None) -> Lab:
    pool = make_pool("192M")
    remote = remote or tmp_path / "remote"
    remote.mkdir(exist_ok=True)
    config = write_config(
        tmp_path / "cfg",
        pool=pool,
        mountpoint=tmp_path / "srv",
        apps={"rstudio"},
        remote_dir=remote,
        backup={"datasets": [KEY]},
    )
    loaded = load(config)
    plan = build_plan(loaded)
    apply_storage(plan)
    (d,) = [d for d in plan.datasets if d.key == KEY]
    return Lab(loaded, config, Path(d.path), d.name, remote, tmp_path / "state")


def cli_argv(lab: Lab, *args: str) -> list[str]:
    """`homelab backup ARGS` on the lab's config and state folder, as a separate process."""
    code = "from homelab.cli.backup import backup_app; backup_app(prog_name='homelab backup')"
    return [sys.executable, "-c", code, *args, "--config", str(lab.config), "--state-dir", str(lab.state)]


def fill(
    root: Path, small: int = 200, large: int = 1, large_size: int = 2 << 20, sparse: int = 8 << 20, seed: int = 1
) -> None:
    """Small files in nested folders, a few large ones, a sparse file, a hardlink, symlinks, unicode names, a
    canary."""
    rnd = __import__("random").Random(seed)
    for i in range(small):
        folder = root / f"plaindir-{i % 17:02d}" / f"plainsub-{i % 5}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"plainfile-{i:05d}.txt").write_bytes(rnd.randbytes(64 + (i * 37) % 1500))
    for i in range(large):
        (root / f"plainlarge-{i}.bin").write_bytes(rnd.randbytes(large_size))
    with (root / "plainsparse.img").open("wb") as handle:
        handle.seek(sparse - 5)
        handle.write(b"tail!")
    for name in UNICODE_NAMES:
        (root / name).write_text(f"unicode {name}\n", encoding="utf-8")
    (root / "plaincanary.txt").write_bytes(b"secret notes: " + CANARY + b"\n")
    (root / "plainempty.txt").write_bytes(b"")
    os.link(root / "plaincanary.txt", root / "plainhardlink.txt")  # one file, two names
    os.symlink("plaincanary.txt", root / "plainlink-relative")
    os.symlink("plaindir-00/plainsub-0", root / "plainlink-dir")
    os.symlink("/nonexistent/target", root / "plainlink-dangling")
    dress(root)


def dress(root: Path) -> None:
    """Owners, modes and times a restore must bring back: an app's uid, private files, setgid, old mtimes."""
    (root / "plaincanary.txt").chmod(0o600)
    os.chown(root / "plaincanary.txt", 1000, 1000)
    (root / "plaindir-01").chmod(0o2750)
    os.chown(root / "plaindir-01", 1000, 33)
    (root / "plaindir-00" / "plainsub-0").chmod(0o700)
    (root / "plainempty-dir").mkdir(mode=0o755)
    (root / "plainempty-dir").chmod(0o1777)
    os.chown(root / "plainlink-relative", 1000, 1000, follow_symlinks=False)
    old = 1_500_000_000_123_456_789
    for n, path in enumerate([root / "plaindir-01", root / "plainempty-dir", root / "plainlarge-0.bin"]):
        if path.exists():
            os.utime(path, ns=(old + n, old + n))
    os.utime(root / "plainlink-dangling", ns=(old, old), follow_symlinks=False)
    os.utime(root, ns=(old, old))


def assert_links_and_holes(root: Path) -> None:
    """What fill() made a hardlink is one file again, and its sparse file has holes again."""
    assert (root / "plainhardlink.txt").samefile(root / "plaincanary.txt")
    sparse = (root / "plainsparse.img").stat()
    assert sparse.st_blocks * 512 < sparse.st_size, sparse


def attributes(root: Path) -> dict[str, tuple[int, int, int, int]]:
    """(mode, uid, gid, mtime_ns) of every folder, file and symlink under root and of root itself."""
    out = {".": _attrs(root.lstat())}
    for folder, dirs, files in os.walk(root):
        base = Path(folder)
        for name in files + dirs:
            path = base / name
            out[str(path.relative_to(root))] = _attrs(path.lstat())
    return out


def _attrs(st: os.stat_result) -> tuple[int, int, int, int]:
    return (st.st_mode, st.st_uid, st.st_gid, st.st_mtime_ns)


def tree(root: Path) -> dict[str, str]:
    """sha256 manifest: every file and symlink (links by target), relative to root."""
    out: dict[str, str] = {}
    for folder, dirs, files in os.walk(root):
        base = Path(folder)
        for name in files + [d for d in dirs if (base / d).is_symlink()]:
            path = base / name
            rel = str(path.relative_to(root))
            if path.is_symlink():
                out[rel] = "link:" + os.readlink(path)
            else:
                out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out
