"""OnCalendar expressions: the parser that checks backup.schedule at load agrees with systemd 252 on every
expression below (the verdicts were systemd-analyze's own), and the real test asks systemd-analyze again:
whether it parses, and whether it has a next elapse (and when, for the ones in UTC)."""

from __future__ import annotations

import os
import subprocess
from datetime import UTC, datetime

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
    "03:00",
    "3:0",
    "*:0/15",
    "*:00/15:00",
    "01-01",
    "*-02~03",
    "*-*-* 03:00:00 UTC",
    "*-*-* 03:00:00 Europe/Berlin",
    "*-*-* 03:00:00.5",
    "*-*-* 23:59:59",
    "2199-01-01",
    "*-*-1..7 03:00",
    "*-*-1..7/2 03:00",
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
    "00:00:00/5",
    "*-02~01..03",
    "*-02~1",
    "*-*~1",
    "*-1,2..4/2-1",
    "Mon..Fri UTC",
    "*-*-* 01:00:00.0000000000001",
    "daily UTC",
    "01:02:03.5/2",
    "*-*-* 00:00:00/0.5",
    "Fri 2150-*-* 03:00",
    "2150-01-01",
    "2150..2152-01-01",
    "Mon..Fri 2150-01-01 UTC",
    "2150-1-1 1:1:1",
    "@7258118399",  # 2199-12-31 23:59:59, the last second systemd takes
    # what the first parser refused: tz database names without a '/', two-digit years, `~` with a repeat
    "*-*-* 03:00 GMT",
    "03:00 CET",
    "daily EST",
    "Mon 00:30 PST8PDT",
    "03:00 Etc/GMT+5",
    "03:00 Zulu",
    "50-01-01",
    "*-*~03/1",
    "*-02~01..03 03:00",
    "Mon..Wed,Fri 03:00",
    "Mon, 03:00",
    "semi-annually",
    "anually",
    "3..3:00",  # a range of one value
    "1..2/3:00",
]
# accepted by systemd-analyze, with "Next elapse: never": a past date, or one no month has. Refused at load.
NEVER = [
    "2024-01-01",
    "2024-02-30",
    "*-02-30",
    "*-04-31 03:00",
    "*-02-31..31",
    "@1234567",
    "@0",
    "@12 UTC",
    "2024..2026-01-01",
    "Mon..Fri 2024-01-01 UTC",
    "2024-1-1 1:1:1",
    "Mon 2150-01-01",  # a Friday
    "03-07-07 1:12:1",  # 2003
]
# refused by systemd 252, found accepted by the first parser (issue 32)
INVALID_SINCE_ISSUE_32 = [
    "\u0663:00",  # ARABIC-INDIC DIGIT THREE: Python's \d and str.isdigit() take it, C's isdigit() does not
    "*-*-* \u0661\u0662:00",
    "\uff10\uff13:00",  # FULLWIDTH DIGITS
    "Fri..Mon 03:00",  # a weekday range must go forward
    "Sat-Mon 03:00",
    "*-1..5~29 0:00",  # `~` counts back at most 28 days
    "*-*~1/2",  # repeating back from the last day: it runs past the first
    "@7258118400",  # 2200-01-01
    "@99999999999",
    "23/2:00",  # a repeat that never fits
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
    *INVALID_SINCE_ISSUE_32,
]


@pytest.mark.parametrize("expression", VALID)
def test_the_parser_accepts_what_systemd_accepts(expression: str) -> None:
    assert oncalendar.parse(expression)


@pytest.mark.parametrize("expression", INVALID)
def test_the_parser_refuses_what_systemd_refuses(expression: str) -> None:
    assert not oncalendar.parse(expression)


@pytest.mark.parametrize("expression", VALID)
def test_every_valid_expression_fires_again(expression: str) -> None:
    spec = oncalendar.spec_of(expression)
    assert spec is not None and oncalendar.next_elapse(spec, oncalendar.now_in(spec)) is not None


@pytest.mark.parametrize("expression", NEVER)
def test_an_expression_without_a_next_elapse_is_parsed_but_never_fires(expression: str) -> None:
    spec = oncalendar.spec_of(expression)
    assert spec is not None and oncalendar.next_elapse(spec, oncalendar.now_in(spec)) is None


@pytest.mark.parametrize(
    ("expression", "after", "expected"),
    [
        ("*-*-* 03:00", datetime(2150, 5, 1, 3, 0), datetime(2150, 5, 2, 3, 0)),  # strictly after
        ("Mon *-05~07/1", datetime(2150, 1, 1), datetime(2150, 5, 25)),  # the last Monday of May
        ("*-02~01", datetime(2152, 1, 1), datetime(2152, 2, 29)),  # a leap year's last day of February
        ("*-*-31 12:00", datetime(2150, 4, 1), datetime(2150, 5, 31, 12)),  # April has no 31st
        ("*:0/20:0.5", datetime(2150, 1, 1, 10, 59, 59), datetime(2150, 1, 1, 11, 0, 0, 500000)),
    ],
)
def test_next_elapse_by_hand(expression: str, after: datetime, expected: datetime) -> None:
    spec = oncalendar.spec_of(expression)
    assert spec is not None and oncalendar.next_elapse(spec, after) == expected


def _systemd_next(analyze: str, expression: str) -> tuple[int, str | None]:
    """systemd-analyze's verdict and its `Next elapse` line (None when it refused the expression)."""
    done = subprocess.run(
        [analyze, "calendar", "--", expression],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "TZ": "UTC"},
    )
    lines = [line.split(": ", 1)[1].strip() for line in done.stdout.splitlines() if "Next elapse:" in line]
    return done.returncode, (lines[0] if lines else None)


@pytest.mark.real
def test_systemd_analyze_agrees_with_the_parser(require_program) -> None:  # type: ignore[no-untyped-def]
    analyze = require_program("systemd-analyze")
    for expression in VALID + NEVER + INVALID:
        code, elapse = _systemd_next(analyze, expression)
        assert (code == 0) == oncalendar.parse(expression) == (expression not in INVALID), expression
        if code == 0:
            assert (elapse == "never") == (expression in NEVER), (expression, elapse)


@pytest.mark.real
def test_systemd_analyze_agrees_on_the_next_elapse(require_program) -> None:  # type: ignore[no-untyped-def]
    analyze = require_program("systemd-analyze")
    for expression in [e for e in VALID if e.endswith(" UTC") or not e[-1].isalpha()]:
        spec = oncalendar.spec_of(expression)
        assert spec is not None
        if spec.zone not in (None, "UTC") or spec.usec != ((oncalendar.Part(0),)):
            continue  # whole seconds in UTC only: systemd-analyze prints seconds, in UTC
        now = datetime.now(UTC).replace(tzinfo=None)
        _, elapse = _systemd_next(analyze, expression)
        mine = oncalendar.next_elapse(spec, now)
        assert elapse is not None and mine is not None, expression
        assert elapse.endswith(f"{mine:%Y-%m-%d %H:%M:%S} UTC"), (expression, elapse, mine)


def _random_expressions(count: int, seed: int) -> list[str]:
    """Expressions built from pieces near every rule's edge: ranges, repeats, `~`, weekdays, zones."""
    import random

    pick = random.Random(seed).choice  # noqa: S311 - a reproducible sample, not a secret
    atoms = ["*", "0", "1", "03", "7", "12", "13", "23", "24", "28", "29", "30", "31", "32", "59", "60",
             "1..5", "5..1", "3..3", "1..2/3", "1/2", "0/15", "23/2", "1,2", "1.5", "2150", "69", "1969",
             "2199", "2200"]  # fmt: skip
    days = ["", "Mon ", "Sat,Sun ", "Mon..Fri ", "Fri..Mon ", "Mon-Wed,Fri ", "Sunday "]
    zones = ["", " UTC", " Europe/Berlin", " GMT", " utc", " UTC+1", " Nowhere/City"]
    shapes = [
        lambda: f"{pick(days)}{pick(atoms)}-{pick(atoms)}-{pick(atoms)} {pick(atoms)}:{pick(atoms)}:{pick(atoms)}",
        lambda: f"{pick(days)}{pick(atoms)}:{pick(atoms)}",
        lambda: f"{pick(days)}*-{pick(atoms)}~{pick(atoms)} {pick(atoms)}:00",
        lambda: f"{pick(days)}{pick(atoms)}-{pick(atoms)}",
    ]
    return sorted({(pick(shapes)() + pick(zones)).strip() for _ in range(count)})


@pytest.mark.real
def test_systemd_analyze_agrees_on_random_expressions(require_program) -> None:  # type: ignore[no-untyped-def]
    """Beyond the table: a seeded sample near the rules' edges, verdict and `never` alike."""
    analyze = require_program("systemd-analyze")
    disagree = []
    for expression in _random_expressions(300, seed=32):
        code, elapse = _systemd_next(analyze, expression)
        spec = oncalendar.spec_of(expression)
        mine_never = spec is not None and oncalendar.next_elapse(spec, oncalendar.now_in(spec)) is None
        if (code == 0) != (spec is not None) or (code == 0 and (elapse == "never") != mine_never):
            disagree.append((expression, code, elapse))
    assert disagree == []
