"""homelab/entry.py's start-up handler: one line, the --json document when asked, exit 128 + n."""

from __future__ import annotations

import json
import signal

import pytest

from homelab import entry


class _Exited(Exception):
    pass


@pytest.mark.parametrize(("signum", "word"), [(signal.SIGINT, "interrupted"), (signal.SIGTERM, "terminated")])
@pytest.mark.parametrize("as_json", [False, True])
def test_a_signal_at_start_up_ends_quietly(
    monkeypatch: pytest.MonkeyPatch, signum: int, word: str, as_json: bool
) -> None:
    written: dict[int, bytes] = {1: b"", 2: b""}

    def write(fd: int, data: bytes) -> int:
        written[fd] += data
        return len(data)

    def exit_(code: int) -> None:
        raise _Exited(code)

    monkeypatch.setattr(entry.os, "write", write)
    monkeypatch.setattr(entry.os, "_exit", exit_)
    monkeypatch.setattr(entry.sys, "argv", ["homelab", "validate", *(["--json"] if as_json else [])])
    with pytest.raises(_Exited) as exited:
        entry._quit_at_once(signum, None)
    assert exited.value.args == (128 + signum,)
    assert written[2] == f"{word}\n".encode()
    if as_json:  # exactly what the CLI's error handler prints (json.dumps, indent 2)
        document = {"ok": False, "exit_code": 128 + signum, "errors": [word]}
        assert written[1].decode() == json.dumps(document, indent=2) + "\n"
    else:
        assert written[1] == b""


def test_the_handlers_are_installed_for_both_signals(monkeypatch: pytest.MonkeyPatch) -> None:
    installed = {}
    monkeypatch.setattr(entry.signal, "signal", lambda signum, handler: installed.setdefault(signum, handler))
    entry.quit_at_once()
    assert installed == {signal.SIGINT: entry._quit_at_once, signal.SIGTERM: entry._quit_at_once}
