"""homelab/files.py, the one way homelab opens a file it reads: each hostile state has its own words."""

from __future__ import annotations

import errno
import os
import socket
from pathlib import Path

import pytest

from homelab import files


def _reason(path: Path, limit: int = 100) -> tuple[str, str]:
    with pytest.raises(files.Unreadable) as caught:
        files.read_bytes(path, limit)
    assert str(caught.value) == f"cannot read {path}: {caught.value.reason}"
    return caught.value.kind, caught.value.reason


def test_a_regular_file_is_read_whole_up_to_the_limit(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"x" * 100)
    assert files.read_bytes(tmp_path / "f", 100) == b"x" * 100
    assert _reason(tmp_path / "f", 99) == ("too_large", "it is larger than 0 KiB")


def test_sizes_are_named_in_kib_or_mib(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"x" * (2 * files.MIB + 1))
    assert _reason(tmp_path / "f", 2 * files.MIB)[1] == "it is larger than 2 MiB"
    assert _reason(tmp_path / "f", 64 * files.KIB)[1] == "it is larger than 64 KiB"


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda p: os.mkfifo(p), ("special", "it is a named pipe (FIFO), not a regular file")),
        (lambda p: p.mkdir(), ("special", "it is a folder, not a regular file")),
        (lambda p: p.symlink_to(p.name), ("other", "a symbolic link loop")),
        (lambda p: None, ("missing", "no such file")),
    ],
)
def test_hostile_states_are_named(tmp_path: Path, make, expected: tuple[str, str]) -> None:  # type: ignore[no-untyped-def]
    make(tmp_path / "f")
    assert _reason(tmp_path / "f") == expected


def test_a_socket_is_not_read(tmp_path: Path) -> None:
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(tmp_path / "s"))
        assert _reason(tmp_path / "s") == ("special", "it is a socket, not a regular file")


def test_a_file_where_a_folder_goes_counts_as_missing(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    assert _reason(tmp_path / "file" / "f") == ("missing", "a part of the path is not a folder")
    assert files.read_if_exists(tmp_path / "file" / "f", 10) is None
    assert files.read_if_exists(tmp_path / "nothing", 10) is None


def test_permission_denied_is_said_plainly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "f").write_text("x")

    def denied(*_: object, **__: object) -> int:
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(files.os, "open", denied)  # the tests run as root, who may read anything
    assert _reason(tmp_path / "f") == ("other", "permission denied: the current user may not read it")
    with pytest.raises(files.Unreadable):
        files.read_if_exists(tmp_path / "f", 10)
