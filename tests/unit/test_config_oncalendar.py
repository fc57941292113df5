"""OnCalendar expressions: the parser that checks backup.schedule at load agrees with systemd 252 on every
expression below (the verdicts were systemd-analyze's own), and the real test asks systemd-analyze again."""

from __future__ import annotations

import pytest

from homelab.config import oncalendar

# accepted by `systemd-analyze calendar` (systemd 252)
VALID = [
    "*-*-* 03:00:00",
    "daily",
    "Daily",
    "weekly",
    "hourly",
    "Mon..Fri *-*-* 03:00",
    "Mon-Fri 03:00",
    "Mon,Wed *-*-* 04:00:00",
    "Sat,Sun 10:00",
    "Fri 2026-*-* 03:00",
    "03:00",
    "3:0",
    "*:0/15",
    "*:00/15:00",
    "2024-01-01",
    "2024-02-30",
    "01-01",
    "*-02~03",
    "*-*-* 03:00:00 UTC",
    "*-*-* 03:00:00 Europe/Berlin",
    "*-*-* 03:00:00.5",
    "*-*-* 23:59:59",
    "2199-01-01",
    "*-*-1..7 03:00",
    "*-*-1..7/2 03:00",
    "@1234567",
    "mon 03:00",
    "MONDAY *-*-* 03:00",
    "*-*-*",
    "*-*-* *:*:*",
    "*:*",
    "minutely",
    "quarterly",
    "bi-annually",
    "Mon..Fri",
    "*-*-* 03:00:00 utc",
    "12:00:00 UTC",
    "0/2:00",
    "*-*-* 3:00 UTC",
    "1..5:00",
    "1,2,3:00",
    "1..5/2:00",
    "*-*-* 1:00:00.1234567",
    "Mon..Sun,Sat 03:00",
    "2024-1-1 1:1:1",
    "00:00:00/5",
    "*-02~01..03",
    "*-02~1",
    "*-*~1",
    "2024..2026-01-01",
    "*-1,2..4/2-1",
    "@0",
    "Mon..Fri UTC",
    "*-*-* 01:00:00.0000000000001",
    "Mon..Fri 2024-01-01 UTC",
    "@12 UTC",
    "daily UTC",
    "01:02:03.5/2",
    "*-*-* 00:00:00/0.5",
]
# refused by `systemd-analyze calendar` (systemd 252)
INVALID = [
    "*-*-* 25:99:00",
    "every day at 3",
    "*-02~03..1",
    "*-*-* 03:00:00 Mars/Olympus_Mons",
    "*-*-* 03:00:60",
    "*-*-* 24:00:00",
    "*-13-01 00:00",
    "*-00-01 00:00",
    "*-01-00 00:00",
    "*-01-32 00:00",
    "1969-01-01",
    "2200-01-01",
    "*-*-7..1 03:00",
    "*-*-*/2 03:00",
    "*/2-*-* 03:00",
    "Funday 03:00",
    " ",
    "*",
    "03:00 Mon",
    "*..5:00",
    "Mon.. 03:00",
    "*:*:0/0",
    "today",
    "now",
    "tomorrow",
    "*/2:00",
    "*:*/5",
    "*-*-1/0",
    "1..5/0:00",
    "@",
    "@abc",
    "UTC",
    "*-*-* 1:00:00.",
    "*-*-* 03:00 Europe/Berlin x",
    "mon..wed..fri 0:0",
    "1:2:3:4",
    "2024-01-01-01",
    "Mon,,Tue 0:0",
    ",0:0",
    "0:0,",
]


@pytest.mark.parametrize("expression", VALID)
def test_the_parser_accepts_what_systemd_accepts(expression: str) -> None:
    assert oncalendar.parse(expression)


@pytest.mark.parametrize("expression", INVALID)
def test_the_parser_refuses_what_systemd_refuses(expression: str) -> None:
    assert not oncalendar.parse(expression)


@pytest.mark.real
def test_systemd_analyze_agrees_with_the_parser(require_program) -> None:  # type: ignore[no-untyped-def]
    import subprocess

    analyze = require_program("systemd-analyze")
    for expression in VALID + INVALID:
        verdict = subprocess.run([analyze, "calendar", "--", expression], capture_output=True, check=False)
        assert (verdict.returncode == 0) == oncalendar.parse(expression) == (expression in VALID), expression
