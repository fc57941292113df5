"""systemd OnCalendar expressions, checked exactly by a parser of systemd's grammar (systemd.time(7),
"Calendar events"; systemd 252). Loading is pure (docs/architecture.md: no programs run), so this
parser, not `systemd-analyze calendar`, decides; tests/unit/test_config_oncalendar.py keeps the two in
step on every expression it lists, and the real test there runs systemd-analyze on each.

    [WEEKDAYS] [[YEAR-]MONTH-DAY] [HOUR:MINUTE[:SECOND]] [TIMEZONE]   or a shorthand such as daily
"""

from __future__ import annotations

import re
import zoneinfo

SHORTHANDS = {
    "minutely", "hourly", "daily", "monthly", "weekly", "yearly", "annually",
    "quarterly", "semiannually", "biannually", "bi-annually",
}  # fmt: skip
EXAMPLE = "(e.g. '*-*-* 03:00:00', 'Mon..Fri 02:30', 'daily'; see man systemd.time)"
_DAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_NUMBER = r"\d+"


def _weekday(word: str) -> bool:
    word = word.lower()
    return any(word in (day, day[:3]) for day in _DAYS)


def _weekdays(text: str) -> bool:
    for item in text.split(","):
        ends = item.split("..") if ".." in item else item.split("-")
        if not 1 <= len(ends) <= 2 or not all(_weekday(end) for end in ends):
            return False
    return True


def _component(text: str, low: int, high: int, *, fraction: bool = False) -> bool:
    """One of year/month/day/hour/minute/second: `*`, or a list of values, ranges `a..b` and repeats `/n`."""
    if text == "*":
        return True
    number = r"\d+(?:\.\d+)?" if fraction else r"\d+"
    item_re = re.compile(rf"({number})(?:\.\.({number}))?(?:/({number}))?")
    for item in text.split(","):
        match = item_re.fullmatch(item)
        if match is None:
            return False
        start, end, repeat = match.groups()
        values = [float(v) for v in (start, end) if v is not None]
        if any(not low <= v <= high for v in values) or values != sorted(values):
            return False
        if repeat is not None and float(repeat) <= 0:
            return False
    return True


def _date(text: str) -> bool:
    parts = text.replace("~", "-").split("-")
    if len(parts) == 2:
        parts = ["*", *parts]
    if len(parts) != 3 or text.count("~") > 1:
        return False
    year, month, day = parts
    return _component(year, 1970, 2199) and _component(month, 1, 12) and _component(day, 1, 31)


def _time(text: str) -> bool:
    parts = text.split(":")
    if len(parts) == 2:
        parts.append("00")
    if len(parts) != 3:
        return False
    hour, minute, second = parts
    return _component(hour, 0, 23) and _component(minute, 0, 59) and _component(second, 0, 59, fraction=True)


def _timezone(word: str) -> bool:
    if word.upper() == "UTC":
        return True
    try:
        zoneinfo.ZoneInfo(word)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return False
    return "/" in word


def parse(expression: str) -> bool:
    """True when systemd would accept the expression (the grammar of systemd 252)."""
    words = expression.split()
    if len(words) > 1 and _timezone(words[-1]):
        words = words[:-1]
    if len(words) == 1 and (words[0].lower() in SHORTHANDS or re.fullmatch(r"@\d+", words[0])):
        return True
    if words and not any(c.isdigit() or c == "*" for c in words[0]):
        if not _weekdays(words[0]):
            return False
        words = words[1:]
        if not words:
            return True
    if not words or len(words) > 2:
        return False
    if len(words) == 2:
        return _date(words[0]) and _time(words[1])
    return _time(words[0]) if ":" in words[0] else _date(words[0])
