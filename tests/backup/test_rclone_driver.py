"""The rclone driver against a stand-in program (tests/backup/standin_rclone.py): the argv it builds, the
exact file lists, how failures and silence end, and that secrets never show."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from homelab.runtime.rclone import (
    CheckResult,
    Rclone,
    RcloneError,
    Result,
    Stats,
    Tail,
    mtime_ns,
    parse_combined,
    parse_log,
    write_list,
)

STANDIN = Path(__file__).with_name("standin_rclone.py")
HOSTILE = ["new\nline.txt", "tab\there", "nul-free but trailing space ", "ünï/cödé", "-starts-with-dash"]


@pytest.fixture
def standin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    program = tmp_path / "rclone"
    program.write_text(f'#!/bin/sh\nexec {sys.executable} {STANDIN} "$@"\n')
    program.chmod(0o755)
    record = tmp_path / "calls.jsonl"
    monkeypatch.setenv("STANDIN_RECORD", str(record))
    return program


def _calls(tmp_path: Path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]


def _driver(tmp_path: Path, standin: Path, stall: float = 300) -> Rclone:
    return Rclone(tmp_path / "rclone.conf", tmp_path / "logs", binary=str(standin), stall_timeout=stall)


def test_file_lists_are_nul_separated_and_exact(tmp_path: Path) -> None:
    raw = write_list(tmp_path / "list", [*HOSTILE, "bad-\udcff-byte"]).read_bytes()
    assert raw.split(b"\0")[:-1] == [n.encode() for n in HOSTILE] + [b"bad-\xff-byte"]


def test_copy_hands_rclone_every_name_whole(tmp_path: Path, standin: Path) -> None:
    driver = _driver(tmp_path, standin)
    result = driver.copy("hl-x-crypt:current/a", tmp_path / "to", label="restore", files=HOSTILE)
    assert result.ok
    (call,) = _calls(tmp_path)
    assert call["files"] == HOSTILE and "--files-from0" in call["argv"]
    assert call["argv"][:2] == ["--config", str(tmp_path / "rclone.conf")]
    assert call["argv"][call["argv"].index("--timeout") + 1] == "150s"  # half the stall limit


def test_a_silent_remote_ends_the_command_within_the_stall_limit(
    tmp_path: Path, standin: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STANDIN_MODE", "hang")  # stats lines keep coming, nothing moves
    driver = _driver(tmp_path, standin, stall=1.0)
    started = time.monotonic()
    result = driver.sync(tmp_path, "hl-x-crypt:current/a", backup_dir="hl-x-crypt:archive/1/a", label="sync")
    assert time.monotonic() - started < 60  # generous: the point is that it ends at all
    assert not result.ok and result.timed_out
    assert "no progress for" in result.why("sync") and "stall_timeout" in result.why("sync")


def test_errors_from_the_log_are_kept_and_redacted(tmp_path: Path, standin: Path, monkeypatch) -> None:
    monkeypatch.setenv("STANDIN_MODE", "errors")
    driver = _driver(tmp_path, standin)
    result = driver.sync(tmp_path, "hl-x-crypt:c", backup_dir="hl-x-crypt:a", label="sync")
    assert not result.ok and result.enospc
    assert result.why("sync") == "the remote is full (ENOSPC): a/b: no space left on device"
    monkeypatch.setenv("STANDIN_MODE", "fail")
    driver.redactions.append("secret-pw")
    result = driver.sync(tmp_path, "hl-x-crypt:c", backup_dir="hl-x-crypt:a", label="sync")
    assert result.errors == ["boom: ********"] and result.why("sync") == "sync failed: boom: ********"
    with pytest.raises(RcloneError, match=r"rclone copyto failed \(exit 3\): boom: \*\*\*\*\*\*\*\*"):
        driver.copyto("a", "hl-x-crypt:b")


def test_listings_are_json_and_a_missing_folder_is_empty(tmp_path: Path, standin: Path, monkeypatch) -> None:
    entries = [{"Path": "new\nline.json.gz", "IsDir": False}, {"Path": "b", "IsDir": False}]
    monkeypatch.setenv("STANDIN_STDOUT", json.dumps(entries))
    driver = _driver(tmp_path, standin)
    assert driver.list_files("hl-x-crypt:meta/a") == ["new\nline.json.gz", "b"]
    assert driver.list_dirs("hl-x-crypt:archive") == ["new\nline.json.gz", "b"]
    monkeypatch.setenv("STANDIN_MODE", "fail")
    assert driver.list_files("hl-x-crypt:nothing-here", recursive=True) == []
    assert [c["argv"][-2:] for c in _calls(tmp_path)][-1] == ["--files-only", "-R"]


def test_objects_are_listed_with_size_and_exact_mtime(tmp_path: Path, standin: Path, monkeypatch) -> None:
    entries = [
        {"Path": "a/new\nline", "Size": 5, "ModTime": "2025-03-01T03:00:00.123456789Z", "IsDir": False},
        {"Path": "b.rclonelink", "Size": 14, "ModTime": "2025-03-01T04:00:00+01:00", "IsDir": False},
        {"Path": "c", "Size": 0, "ModTime": "2025-03-01T03:00:00.5-02:00", "IsDir": False},
    ]
    monkeypatch.setenv("STANDIN_STDOUT", json.dumps(entries))
    base = 1_740_798_000 * 10**9  # 2025-03-01T03:00:00Z
    assert _driver(tmp_path, standin).list_objects("hl-x-crypt:current/a") == {
        "a/new\nline": (5, base + 123_456_789),
        "b.rclonelink": (14, base),
        "c": (0, base + (2 * 3600 * 10**9) + 500_000_000),
    }
    with pytest.raises(RcloneError, match="not a time: 'yesterday'"):
        mtime_ns("yesterday")


def test_obscure_adds_both_forms_to_the_redactions(tmp_path: Path, standin: Path) -> None:
    driver = _driver(tmp_path, standin)
    obscured = driver.obscure("hunter2")
    assert obscured == "obscured-2retnuh" and {"hunter2", obscured} <= set(driver.redactions)


def test_cryptcheck_report_and_its_failure_without_a_report(tmp_path: Path, standin: Path, monkeypatch) -> None:
    combined = tmp_path / "c.combined"
    combined.write_bytes(b"= same\n* changed\n+ only-here\n- only-there\n! broken\n? unknown\n")
    got = parse_combined(combined)
    assert (got.matched, got.differ, got.missing, got.extra, got.errors) == (
        1,
        ["changed"],
        ["only-here"],
        ["only-there"],
        ["broken"],
    )
    assert got.problems == [
        "differs: changed",
        "missing on the remote: only-here",
        "not in the snapshot: only-there",
        "error: broken",
    ]
    monkeypatch.setenv("STANDIN_MODE", "fail")
    result = _driver(tmp_path, standin).cryptcheck(tmp_path, "hl-x-crypt:c", label="check", files=["a"])
    assert result == CheckResult(errors=["cryptcheck failed: boom: secret-pw"])


def test_parse_log_reads_stats_copies_and_unchecked_hashes(tmp_path: Path) -> None:
    log = tmp_path / "sync.log"
    lines = [
        {"level": "info", "msg": "Copied (new)", "object": "a.txt"},
        {"level": "notice", "msg": "s", "stats": {"bytes": 5, "totalBytes": 9, "transfers": 1, "totalTransfers": 2}},
        {"level": "notice", "msg": "3 hashes could not be checked"},
    ]
    log.write_text("".join(json.dumps(x) + "\n" for x in lines) + "[1,2]\n")
    result = parse_log(log, 0)
    assert result.copied == ["a.txt"] and result.stats == Stats(5, 9, 1, 2)
    assert not result.ok and result.errors == ["3 hashes could not be checked"]
    assert Result(False, -9).why("sync") == "rclone sync was killed (signal 9)"
    assert Result(False, 2).why("copy") == "copy failed: rclone exited with 2"


def test_tail_reports_progress_and_copies_and_waits_for_whole_lines(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    now = [0.0]
    seen: list[Stats] = []
    copied: list[str] = []
    tail = Tail(log, seen.append, copied.append, stall=10, clock=lambda: now[0])
    assert tail.poll() is None  # no log yet
    with log.open("w") as handle:
        handle.write(json.dumps({"level": "info", "msg": "Copied (new)", "object": "ü.txt"}) + "\n")
        handle.write('{"level": "notice", "stats": {"bytes"')  # rclone is mid-line
    assert tail.poll() is None and copied == ["ü.txt"] and not seen
    with log.open("a") as handle:
        handle.write(': 7}, "msg": ""}\n')
    assert tail.poll() is None and seen == [Stats(bytes=7)]
    now[0] = 9.0
    assert tail.poll() is None
    with log.open("a") as handle:  # the same stats again, and errors: nothing moved
        handle.write(json.dumps({"level": "notice", "msg": "", "stats": {"bytes": 7, "errors": 3}}) + "\n")
        handle.write(json.dumps({"level": "error", "msg": "i/o timeout", "object": "a"}) + "\n")
    now[0] = 10.5
    assert "no progress for 10 s" in (tail.poll() or "")


def test_a_short_command_that_never_answers_is_stopped(tmp_path: Path, standin: Path, monkeypatch) -> None:
    monkeypatch.setenv("STANDIN_MODE", "hang")
    driver = _driver(tmp_path, standin, stall=0.25)  # run() allows four stall limits: 1 s
    with pytest.raises(RcloneError, match="no answer from the remote in 1 s"):
        driver.list_dirs("hl-x-crypt:archive")


def test_find_rclone_prefers_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from homelab.runtime.rclone import find_rclone

    monkeypatch.setenv("HOMELAB_RCLONE", "/opt/rclone")
    assert find_rclone() == "/opt/rclone"
    monkeypatch.delenv("HOMELAB_RCLONE")
    assert Path(find_rclone()).name == "rclone"


def test_names_are_spelled_as_rclone_spells_them() -> None:
    from homelab.runtime.rclone import encode_name

    # seen from rclone 1.75: `lsjson` of a local folder and of the crypt remote it was synced to
    assert encode_name("new\nline.txt") == "new\u240aline.txt"
    assert encode_name("tab\there") == "tab\u2409here"
    assert encode_name("lit\u240aeral") == "lit\u201b\u240aeral"
    assert encode_name("del\x7f") == "del\u2421"
    assert encode_name("plain ünï *?[]") == "plain ünï *?[]"
    # seen from rclone 1.75 `lsjson` of a local folder: each byte that is not UTF-8 read as U+FFFD, and the
    # quoting character itself quoted
    assert encode_name(os.fsdecode(b"a\xff\xfe.txt")) == "a\ufffd\ufffd.txt"
    assert encode_name("q\u201bx") == "q\u201b\u201bx"


def test_uploads_checked_by_hash_are_told_from_the_others(tmp_path: Path) -> None:
    # lines of rclone 1.75 `sync --log-level DEBUG --use-json-log` to a crypt remote over a local folder, in its
    # compact form (`"level":"debug"`, then msg and object)
    lines = [
        {"level": "debug", "msg": "Need to transfer - File not found at Destination", "object": "new\u240aline"},
        {
            "level": "debug",
            "msg": "md5 = 22a41f443b76089212f72e275919a5a5 OK",
            "object": "new\u240aline.00a2a7de.partial",
        },
        {"level": "debug", "msg": "size = 2 OK", "object": "new\u240aline.00a2a7de.partial"},
        {"level": "debug", "msg": "renamed to: new\u240aline", "object": "new\u240aline.00a2a7de.partial"},
        {"level": "info", "msg": "Copied (new)", "object": "new\u240aline"},
        {"level": "debug", "msg": "size = 12345678 OK", "object": "sub/b.2a521f30.partial"},
        {"level": "info", "msg": "Copied (new)", "object": "sub/b"},
    ]
    log = tmp_path / "sync.log"
    log.write_text("".join(json.dumps(x, ensure_ascii=False, separators=(",", ":")) + "\n" for x in lines))
    result = parse_log(log, 0)
    assert result.copied == ["new\u240aline", "sub/b"] and result.verified == ["new\u240aline"]
    assert result.unverified == ["sub/b"]
    handed: list[str] = []
    Tail(log, None, handed.append, stall=10).poll()
    assert handed == ["sub/b"]  # only what still needs a cryptcheck


def test_a_long_silent_check_is_not_stopped_a_long_silent_sync_is(tmp_path: Path, standin: Path, monkeypatch) -> None:
    monkeypatch.setenv("STANDIN_MODE", "slow")
    driver = _driver(tmp_path, standin, stall=0.5)
    assert driver.cryptcheck(tmp_path, "hl-x-crypt:c", label="check").errors == []
    result = driver.sync(tmp_path, "hl-x-crypt:c", backup_dir="hl-x-crypt:a", label="sync")
    assert result.timed_out and not result.ok


def test_the_tail_is_the_result_the_log_read_once(tmp_path: Path) -> None:
    """A command's result comes from the lines the tail read as the log grew, the last one even without its
    newline (rclone killed mid-line): no second pass over a 50,000-line DEBUG log after the sync."""
    lines = [
        {"level": "debug", "msg": "Need to transfer - File not found at Destination", "object": "a"},
        {"level": "debug", "msg": "md5 = 22a41f443b76089212f72e275919a5a5 OK", "object": "a.00a2a7de.partial"},
        {"level": "debug", "msg": "size = 2 OK", "object": "a.00a2a7de.partial"},
        {"level": "info", "msg": "Copied (new)", "object": "a"},
        {"level": "notice", "msg": "", "stats": {"bytes": 2, "transfers": 1}},
        {"level": "info", "msg": "Copied (new)", "object": "b\u240a"},
        {"level": "error", "msg": "connection lost", "object": "c"},
    ]
    text = "".join(json.dumps(x, ensure_ascii=False, separators=(",", ":")) + "\n" for x in lines)
    log = tmp_path / "sync.log"
    log.write_text(text[: len(text) // 2])
    tail = Tail(log, None, None, stall=10)
    tail.poll()
    log.write_text(text.rstrip("\n"))
    tail.poll(final=True)
    assert tail.result(1) == parse_log(log, 1)
    assert tail.result(1) == Result(
        False, 1, Stats(bytes=2, transfers=1), ["c: connection lost"], ["a", "b\u240a"], ["a"]
    )


def test_every_character_rclone_respells_is_respelled_inside_a_name() -> None:
    from homelab.runtime.rclone import _PICTURES, _QUOTED, encode_name

    for char, spelled in (_PICTURES | _QUOTED).items():  # a name needing nothing is returned as it is
        assert encode_name(f"a{char}b{char}") == f"a{spelled}b{spelled}", hex(ord(char))
    assert encode_name("plain ünï *?[] \u2420 \u2400") == "plain ünï *?[] \u2420 \u2400"
