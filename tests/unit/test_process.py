"""The subprocess seam: captured runs redact secrets; streamed runs hand over the terminal."""

from __future__ import annotations

import logging
import sys

import pytest

from homelab.errors import CommandFailed
from homelab.redact import REDACTED
from homelab.runtime import process


def test_run_redacts_secrets_from_the_log_and_the_error(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="homelab.process")
    with pytest.raises(CommandFailed) as failed:
        process.run([sys.executable, "-c", "import sys; print('s3cr3t'); sys.exit(3)", "s3cr3t"], redactions=["s3cr3t"])
    assert "s3cr3t" not in str(failed.value) and "s3cr3t" not in caplog.text
    assert REDACTED in caplog.text


def test_stream_passes_output_through_and_returns_the_exit_code(
    capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="homelab.process")
    code = process.stream([sys.executable, "-c", "import sys; print('line 1'); sys.exit(4)", "tok"], redactions=["tok"])
    assert code == 4
    assert capfd.readouterr().out == "line 1\n"
    assert "tok" not in caplog.text
    assert process.stream(["/nonexistent/program"]) == 127
