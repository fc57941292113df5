"""The writer is all or nothing: a write that fails at any point (short write, full disk, failed rename)
leaves the previous output byte-identical, modes included, with no temporary file left behind.
Faults are injected into os.write / os.replace here; tests/unit/test_writer_tmpfs.py does it for real."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from homelab.cli import app
from homelab.cli import commands as _commands  # noqa: F401 - registers the commands
from homelab.config.loaded import LoadedConfig
from homelab.config.loader import load
from homelab.errors import RefusedToOverwrite, WriteFailed
from homelab.project import render_project

runner = CliRunner()
STAGING_SUFFIXES = (".homelab-new", ".homelab-old")


def snapshot(root: Path) -> dict[str, tuple[int, bytes | None]]:
    """Every entry under root: its mode and, for files, its bytes."""
    tree: dict[str, tuple[int, bytes | None]] = {}
    for path in sorted(root.rglob("*")):
        info = path.lstat()
        tree[str(path.relative_to(root))] = (info.st_mode, path.read_bytes() if path.is_file() else None)
    return tree


def leftovers(root: Path) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.name.endswith(STAGING_SUFFIXES)]


def change_timezone(config: Path) -> None:
    """A change that rewrites every compose file (TZ is in each service)."""
    config.write_text(config.read_text().replace("America/New_York", "Europe/Berlin"))


@pytest.fixture
def rendered(example_config: Path) -> Path:
    render_project(load(example_config))
    return example_config.parent / "stacks"


def _fail_on_call(monkeypatch: pytest.MonkeyPatch, name: str, n: int, error: int = errno.ENOSPC) -> None:
    real = getattr(os, name)
    calls = {"n": 0}

    def faulty(*args: object, **kwargs: object) -> object:
        calls["n"] += 1
        if calls["n"] == n:
            raise OSError(error, os.strerror(error))
        return real(*args, **kwargs)

    monkeypatch.setattr(os, name, faulty)


def _writes(loaded: LoadedConfig) -> int:
    """How many files a render of `loaded` writes: the new and changed ones, and the two manifests."""
    report = render_project(loaded, dry_run=True).report
    writes = len(report.by_status("new") + report.by_status("changed")) + 2
    assert writes > 5
    return writes


@pytest.mark.parametrize("n", [1, 5, -1])
def test_a_failed_write_leaves_the_previous_output_exactly(
    rendered: Path, example_config: Path, monkeypatch: pytest.MonkeyPatch, n: int
) -> None:
    before = snapshot(rendered)
    change_timezone(example_config)
    loaded = load(example_config)
    n = _writes(loaded) if n == -1 else n  # -1: the very last write (the manifest)
    _fail_on_call(monkeypatch, "write", n)
    with pytest.raises(WriteFailed, match=r"No space left on device; the previous output is unchanged"):
        render_project(loaded)
    assert snapshot(rendered) == before
    assert leftovers(rendered) == []


def test_a_short_write_is_continued_not_ignored(
    tmp_path: Path, example_config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    render_project(load(example_config), tmp_path / "whole")
    real_write = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: real_write(fd, bytes(data[:1000])))
    render_project(load(example_config), tmp_path / "short")
    whole, short = snapshot(tmp_path / "whole"), snapshot(tmp_path / "short")
    secrets = {k for k in whole if k.startswith("secrets/")}
    # generated secrets (and so their hashes) are random per folder; everything else is byte-identical
    assert {k: v for k, v in short.items() if k not in secrets} == {k: v for k, v in whole.items() if k not in secrets}


def test_a_write_that_makes_no_progress_is_a_full_disk(
    rendered: Path, example_config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = snapshot(rendered)
    change_timezone(example_config)
    loaded = load(example_config)
    monkeypatch.setattr(os, "write", lambda fd, data: 0)
    with pytest.raises(WriteFailed, match="No space left on device"):
        render_project(loaded)
    assert snapshot(rendered) == before


def _no_hard_links(*args: object) -> None:
    raise OSError(errno.EPERM, os.strerror(errno.EPERM))


@pytest.mark.parametrize("links", [True, False], ids=["hard-links", "no-hard-links"])
@pytest.mark.parametrize("n", [1, 2, 4, -1])
def test_a_failed_swap_is_rolled_back(
    rendered: Path, example_config: Path, monkeypatch: pytest.MonkeyPatch, n: int, links: bool
) -> None:
    before = snapshot(rendered)
    change_timezone(example_config)
    loaded = load(example_config)
    writes = _writes(loaded)
    if not links:
        monkeypatch.setattr(os, "link", _no_hard_links)  # each original is moved aside: twice the renames
        writes *= 2
    n = writes if n == -1 else n  # -1: the last rename (the manifest)
    _fail_on_call(monkeypatch, "replace", n, errno.EIO)
    with pytest.raises(WriteFailed, match="Input/output error"):
        render_project(loaded)
    assert snapshot(rendered) == before
    assert leftovers(rendered) == []


def test_a_failed_first_render_leaves_no_folder(
    tmp_path: Path, example_config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "new" / "stacks"
    loaded = load(example_config)
    _fail_on_call(monkeypatch, "write", 10)
    with pytest.raises(WriteFailed):
        render_project(loaded, out)
    assert not (tmp_path / "new").exists()


def test_out_being_a_file_is_one_line_and_exit_1(tmp_path: Path, example_config: Path) -> None:
    target = tmp_path / "a-file"
    target.write_bytes(b"keep me\n")
    for command in ("render", "plan"):
        result = runner.invoke(app, [command, "-c", str(example_config), "--out", str(target)])
        assert result.exit_code == 1, result.output
        assert result.stderr == (
            f"error: cannot write {target}: it is a file, not a folder; the previous output is unchanged\n"
        )
        assert result.exception is None or isinstance(result.exception, SystemExit)
    assert target.read_bytes() == b"keep me\n"


def test_out_under_a_file_is_one_line_and_exit_1(tmp_path: Path, example_config: Path) -> None:
    (tmp_path / "a-file").write_bytes(b"keep me\n")
    out = tmp_path / "a-file" / "stacks"
    result = runner.invoke(app, ["render", "-c", str(example_config), "--out", str(out)])
    assert result.exit_code == 1, result.output
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith(f"error: cannot write {tmp_path / 'a-file'}")
    assert "Not a directory" in result.stderr or "File exists" in result.stderr


def test_a_hand_edited_rendered_secret_is_not_overwritten(rendered: Path, example_config: Path) -> None:
    conf = rendered / "secrets" / "edge_ddclient_conf"
    conf.write_bytes(conf.read_bytes() + b"# my edit\n")
    edited = snapshot(rendered)
    with pytest.raises(RefusedToOverwrite, match="secrets/edge_ddclient_conf"):
        render_project(load(example_config))
    assert snapshot(rendered) == edited
    render_project(load(example_config), force=True)
    assert b"# my edit" not in conf.read_bytes()


def test_the_refusal_does_not_print_the_secret(rendered: Path, example_config: Path) -> None:
    conf = rendered / "secrets" / "edge_ddclient_conf"
    conf.write_bytes(conf.read_bytes() + b"# my edit\n")
    result = runner.invoke(app, ["render", "-c", str(example_config)])
    assert result.exit_code == RefusedToOverwrite.exit_code
    assert "example-ddns-password-value" not in result.output
    assert "edge_ddclient_conf" in result.stderr


def test_a_rendered_secret_changed_by_the_config_is_rewritten(rendered: Path, example_config: Path) -> None:
    example_config.write_text(example_config.read_text().replace("login: nas-owner", "login: someone-else"))
    render_project(load(example_config))
    assert b"login=someone-else" in (rendered / "secrets" / "edge_ddclient_conf").read_bytes()


def test_loosened_modes_are_tightened_on_a_render_that_changes_nothing(rendered: Path, example_config: Path) -> None:
    secrets = rendered / "secrets"
    secrets.chmod(0o755)
    (secrets / "edge_ddclient_conf").chmod(0o644)
    result = render_project(load(example_config))
    assert not result.report.changed
    assert stat.S_IMODE(secrets.stat().st_mode) == 0o700
    assert stat.S_IMODE((secrets / "edge_ddclient_conf").stat().st_mode) == 0o600


def test_secret_hashes_are_kept_private(rendered: Path) -> None:
    public = (rendered / ".homelab-manifest.json").read_text()
    assert "secrets/" not in public
    assert stat.S_IMODE((rendered / "secrets" / ".homelab-manifest.json").stat().st_mode) == 0o600


def test_an_output_from_before_the_secret_manifest_is_trusted_once(rendered: Path, example_config: Path) -> None:
    (rendered / "secrets" / ".homelab-manifest.json").unlink()
    example_config.write_text(example_config.read_text().replace("login: nas-owner", "login: someone-else"))
    render_project(load(example_config))
    assert (rendered / "secrets" / ".homelab-manifest.json").exists()


def test_a_failed_render_does_not_even_change_a_mode(
    rendered: Path, example_config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (rendered / "secrets").chmod(0o755)
    before = snapshot(rendered)
    change_timezone(example_config)
    loaded = load(example_config)
    _fail_on_call(monkeypatch, "write", 3)
    with pytest.raises(WriteFailed):
        render_project(loaded)
    assert snapshot(rendered) == before


def test_a_file_where_the_secrets_folder_goes(tmp_path: Path, example_config: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "secrets").write_bytes(b"not a folder\n")
    (out / "secrets").chmod(0o644)
    before = snapshot(out)
    with pytest.raises(WriteFailed, match=r"cannot write .*/out/secrets: Not a directory"):
        render_project(load(example_config), out)
    assert snapshot(out) == before


def test_without_hard_links_a_render_still_completes_cleanly(
    rendered: Path, example_config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "link", _no_hard_links)
    change_timezone(example_config)
    render_project(load(example_config))
    assert b"TZ: Europe/Berlin" in (rendered / "cloud" / "compose.yaml").read_bytes()
    assert leftovers(rendered) == []


def test_write_atomic_for_shared_folders_continues_short_writes_and_leaves_no_half_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from homelab.ownership import write_atomic

    (tmp_path / "units").mkdir()
    target = tmp_path / "units" / "homelab-backup.timer"
    target.write_bytes(b"before\n")
    real_write = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: real_write(fd, bytes(data[:3])))
    write_atomic(target, b"0123456789\n", 0o644)
    assert target.read_bytes() == b"0123456789\n"
    _fail_on_call(monkeypatch, "write", 1)
    with pytest.raises(OSError, match="No space left on device"):
        write_atomic(target, b"new content\n", 0o644)
    assert target.read_bytes() == b"0123456789\n"
    assert sorted(p.name for p in (tmp_path / "units").iterdir()) == ["homelab-backup.timer"]
