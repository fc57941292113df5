"""systemd OnCalendar expressions, checked as systemd 252 checks them (systemd.time(7), "Calendar events";
src/shared/calendarspec.c): the same grammar read character by character (ASCII digits only: C's isdigit),
the same range rules, and the same search for the next elapse, so an expression that would never fire
(a date in the past, February 30th) is refused at load instead of a backup that silently never runs.
Loading is pure (docs/architecture.md: no programs run): tests/unit/test_config_oncalendar.py keeps this
in step with `systemd-analyze calendar` on every expression it lists, and its real test asks systemd.

    [WEEKDAYS] [[YEAR-]MONTH-DAY] [HOUR:MINUTE[:SECOND]] [TIMEZONE]   or a shorthand such as daily
"""

from __future__ import annotations

import calendar
import time
import zoneinfo
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

EXAMPLE = "(e.g. '*-*-* 03:00:00', 'Mon..Fri 02:30', 'daily'; see man systemd.time)"
MIN_YEAR, MAX_YEAR = 1970, 2199
USEC = 1_000_000
_MAX_ITEMS = 240  # systemd's CALENDARSPEC_COMPONENTS_MAX
_INT_MAX = 2**31 - 1
_DAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_DIGITS = "0123456789"
_ZONEINFO = Path("/usr/share/zoneinfo")


class _Invalid(Exception):
    """The expression is not in the grammar; caught in `spec_of`."""


@dataclass(frozen=True)
class Part:
    """One item of a component: start[..stop][/repeat]; stop -1 and repeat 0 when absent."""

    start: int
    stop: int = -1
    repeat: int = 0


Chain = tuple[Part, ...] | None  # None: `*`, any value


@dataclass(frozen=True)
class Spec:
    weekdays: int = 127  # bit 0 is Monday
    year: Chain = None
    month: Chain = None
    day: Chain = None
    end_of_month: bool = False  # `~`: days count back from the month's last
    hour: Chain = None
    minute: Chain = None
    usec: Chain = None  # the second, in microseconds
    zone: str | None = None  # "UTC", a tz database name, or None: the machine's local time


_ZERO = (Part(0),)
_MIDNIGHT: dict[str, object] = {"hour": _ZERO, "minute": _ZERO, "usec": _ZERO}
_SHORTHANDS: dict[str, dict[str, object]] = {
    "minutely": {"usec": _ZERO},
    "hourly": {"minute": _ZERO, "usec": _ZERO},
    "daily": _MIDNIGHT,
    "weekly": {"weekdays": 1, **_MIDNIGHT},
    "monthly": {"day": (Part(1),), **_MIDNIGHT},
    "quarterly": {"month": (Part(1), Part(4), Part(7), Part(10)), "day": (Part(1),), **_MIDNIGHT},
}
for _name in ("annually", "yearly", "anually"):
    _SHORTHANDS[_name] = {"month": (Part(1),), "day": (Part(1),), **_MIDNIGHT}
for _name in ("biannually", "bi-annually", "semiannually", "semi-annually"):
    _SHORTHANDS[_name] = {"month": (Part(1), Part(7)), "day": (Part(1),), **_MIDNIGHT}


def _timezone_is_valid(name: str) -> bool:
    """systemd's timezone_is_valid: a plain name whose file under /usr/share/zoneinfo is a TZif file."""
    if name == "UTC":
        return True
    allowed = set(_DIGITS + "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-_+/")
    if not name or name.startswith("/") or name.endswith("/") or "//" in name or set(name) - allowed:
        return False
    try:
        with (_ZONEINFO / name).open("rb") as handle:
            return Path(handle.name).is_file() and handle.read(4) == b"TZif"
    except OSError:
        return False


def _split_zone(text: str) -> tuple[str, str | None]:
    """The expression without its time zone, and the zone: ` UTC` (any case), the local zone's
    abbreviation, or a last word that names a tz database file."""
    if text.lower().endswith(" utc"):
        return text[:-4], "UTC"
    time.tzset()
    for abbreviation in time.tzname:
        if abbreviation and text.lower().endswith(" " + abbreviation.lower()) and len(text) > len(abbreviation) + 1:
            return text[: -len(abbreviation) - 1], None
    head, space, last = text.rpartition(" ")
    if space and _timezone_is_valid(last):
        return head, last
    return text, None


def _weekdays(text: str, i: int) -> tuple[int, int]:
    """`Mon,Wed..Fri` at text[i:]: the weekday bits and where the date starts (0 bits: none given)."""
    bits, low, first = 0, -1, True
    while True:
        found = next(
            ((n, name) for n, day in enumerate(_DAYS) for name in (day, day[:3]) if text[i:].lower().startswith(name)),
            None,
        )
        if found is None:
            if first:
                return 0, i
            raise _Invalid
        number, name = found
        i += len(name)
        if text[i : i + 1] not in ("", "-", ".", ",", " "):
            raise _Invalid
        bits |= 1 << number
        if low >= 0:
            if low > number:
                raise _Invalid
            bits |= sum(1 << j for j in range(low + 1, number))
        low, i = _weekday_separator(text, i, low, number)
        if text[i : i + 1] in ("", " "):
            if low >= 0:
                raise _Invalid  # an open range
            return bits, len(text) - len(text[i:].lstrip(" "))
        first = False


def _weekday_separator(text: str, i: int, low: int, number: int) -> tuple[int, int]:
    if text[i : i + 1] == "." or text[i : i + 1] == "-":
        if low >= 0 or (text[i] == "." and text[i + 1 : i + 2] != "."):
            raise _Invalid
        return number, i + (2 if text[i] == "." else 1)
    if text[i : i + 1] == ",":
        return -1, i + 1
    return -1, i


def _digits(text: str, i: int) -> tuple[int, int]:
    j = i
    while text[j : j + 1] and text[j] in _DIGITS:
        j += 1
    if j == i:
        raise _Invalid
    return int(text[i:j]), j


def _decimal(text: str, i: int, usec: bool) -> tuple[int, int]:
    value, i = _digits(text, i)
    if usec:
        value *= USEC
        if text[i : i + 1] == "." and text[i + 1 : i + 2] != ".":
            _, j = _digits(text, i + 1)  # six digits count, the seventh rounds, the rest are read
            digits = text[i + 1 : j]
            value += int(digits[:6].ljust(6, "0")) + (len(digits) > 6 and digits[6] >= "5")
            i = j
    if value > _INT_MAX:
        raise _Invalid
    return value, i


def _chain(text: str, i: int, usec: bool) -> tuple[Chain, int]:
    if text[i : i + 1] == "*":
        return ((Part(0, -1, USEC),) if usec else None), i + 1
    parts: list[Part] = []
    while True:
        if len(parts) > _MAX_ITEMS:
            raise _Invalid
        start, i = _decimal(text, i, usec)
        stop, repeat = -1, 0
        if text[i : i + 2] == "..":
            stop, i = _decimal(text, i + 2, usec)
            repeat = USEC if usec else 1
        if text[i : i + 1] == "/":
            repeat, i = _decimal(text, i + 1, usec)
            if repeat == 0:
                raise _Invalid
        if text[i : i + 1] not in ("", " ", ",", "-", "~", ":"):
            raise _Invalid
        parts.append(Part(start, stop, repeat))
        if text[i : i + 1] != ",":
            return tuple(parts), i
        i += 1


def _timestamp(text: str, i: int) -> dict[str, object]:
    """`@SECONDS`: strtoul's reading (blanks and a sign first), one instant in UTC."""
    rest = text[i:].lstrip(" \t\n\v\f\r")
    sign = -1 if rest[:1] == "-" else 1
    rest = rest[1:] if rest[:1] in ("-", "+") else rest
    value, end = _digits(rest, 0)
    if end != len(rest) or value >= 2**64:
        raise _Invalid
    value = (sign * value) % 2**64
    seconds = value - 2**64 if value >= 2**63 else value  # time_t
    try:
        moment = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(seconds=seconds)
    except OverflowError:
        raise _Invalid from None
    one = {"year": moment.year, "month": moment.month, "day": moment.day, "hour": moment.hour}
    one |= {"minute": moment.minute, "usec": moment.second * USEC}
    return {name: (Part(value),) for name, value in one.items()} | {"zone": "UTC"}


def _date(text: str, i: int) -> tuple[dict[str, object], int, bool]:
    """[[YEAR-]MONTH-DAY] at text[i:]: its fields, where the time starts, and whether it was `@SECONDS`."""
    if i == len(text):
        return {}, i, False
    if text[i] == "@":
        return _timestamp(text, i + 1), len(text), True
    first, j = _chain(text, i, False)
    if text[j : j + 1] in ("", ":"):
        return {}, i, False  # a time, not a date
    chains: list[Chain] = [first]
    end_of_month = False
    while text[j : j + 1] not in ("", " "):
        if len(chains) == 3 or (end_of_month and text[j] in "-~") or text[j] not in "-~":
            raise _Invalid
        end_of_month = end_of_month or text[j] == "~"
        chain, j = _chain(text, j + 1, False)
        chains.append(chain)
    if len(chains) == 1:
        raise _Invalid
    fields: dict[str, object] = dict(zip(("year", "month", "day")[3 - len(chains) :], chains, strict=True))
    return fields | {"end_of_month": end_of_month}, len(text) - len(text[j:].lstrip(" ")), False


def _time(text: str, i: int) -> dict[str, object]:
    if i == len(text):
        return _MIDNIGHT
    hour, i = _chain(text, i, False)
    if text[i : i + 1] != ":":
        raise _Invalid
    minute, i = _chain(text, i + 1, False)
    usec: Chain = _ZERO
    if i < len(text):
        if text[i] != ":":
            raise _Invalid
        usec, i = _chain(text, i + 1, True)
        if i < len(text):
            raise _Invalid
    return {"hour": hour, "minute": minute, "usec": usec}


def _fix_year(chain: Chain) -> Chain:
    """Two-digit years, as systemd reads them: 12 is 2012, 89 is 1989."""

    def full(year: int) -> int:
        return year + 2000 if 0 <= year < 70 else year + 1900 if 70 <= year < 100 else year

    return None if chain is None else tuple(replace(p, start=full(p.start), stop=full(p.stop)) for p in chain)


def _normalized(chain: Chain) -> Chain:
    """A range's end moved back onto its last repeat; a range of one value is that value (`3..3`, `1..2/3`)."""
    if chain is None:
        return None
    ends = [p.stop - (p.stop - p.start) % p.repeat if p.stop > p.start and p.repeat else p.stop for p in chain]
    return tuple(
        Part(p.start) if stop == p.start else replace(p, stop=stop) for p, stop in zip(chain, ends, strict=True)
    )


def _valid(chain: Chain, low: int, high: int, end_of_month: bool = False) -> bool:
    """systemd's chain_valid: every item in range, and each repeat fits at least once."""
    high -= 3 if end_of_month else 0  # `~` counts back at most 28 days
    for p in chain or ():
        if not low <= p.start <= high or p.repeat > high - low:
            return False
        if p.stop >= 0 and (not low <= p.stop <= high or p.start + p.repeat > p.stop):
            return False
        if p.stop < 0 and (p.start - p.repeat < low if end_of_month else p.start + p.repeat > high):
            return False
    return True


def spec_of(expression: str) -> Spec | None:
    """The parsed expression, or None when systemd 252 would refuse it."""
    text, zone = _split_zone(expression)
    if not text:
        return None
    if text.lower() in _SHORTHANDS:
        return Spec(zone=zone, **_SHORTHANDS[text.lower()])  # type: ignore[arg-type]
    try:
        weekdays, i = _weekdays(text, 0)
        fields, i, stamped = _date(text, i)
        fields |= {} if stamped else _time(text, i)
    except _Invalid:
        return None
    fields.setdefault("zone", zone)
    spec = Spec(weekdays=weekdays if 0 < weekdays < 127 else 127, **fields)  # type: ignore[arg-type]
    spec = replace(
        spec,
        year=_normalized(_fix_year(spec.year)),
        month=_normalized(spec.month),
        day=_normalized(spec.day),
        hour=_normalized(spec.hour),
        minute=_normalized(spec.minute),
        usec=_normalized(spec.usec),
        end_of_month=spec.end_of_month and spec.day is not None,
    )
    ranges = ((spec.year, MIN_YEAR, MAX_YEAR), (spec.month, 1, 12), (spec.hour, 0, 23), (spec.minute, 0, 59))
    valid = all(_valid(*r) for r in ranges) and _valid(spec.usec, 0, 60 * USEC - 1)
    return spec if valid and _valid(spec.day, 1, 31, spec.end_of_month) else None


def parse(expression: str) -> bool:
    """True when systemd 252 accepts the expression."""
    return spec_of(expression) is not None


def _next_in(chain: Chain, value: int, high: int) -> int | None:
    """The smallest value >= `value` (and <= high) the chain matches."""
    if chain is None:
        return value if value <= high else None
    found = []
    for p in chain:
        first = p.start if p.start >= value or not p.repeat else p.start + p.repeat * -((p.start - value) // p.repeat)
        if value <= first <= high and (p.stop < 0 or first <= p.stop or first == p.start):
            found.append(first)
    return min(found, default=None)


def _days(spec: Spec, year: int, month: int) -> Chain:
    """The day chain of one month: `~` items counted back from its last day."""
    if not spec.end_of_month or spec.day is None:
        return spec.day
    last = calendar.monthrange(year, month)[1]
    return tuple(
        Part(last - p.stop + 1, last - p.start + 1, p.repeat) if p.stop >= 0 else Part(last - p.start + 1, -1, p.repeat)
        for p in spec.day
    )


def _time_from(spec: Spec, hour: int, minute: int, usec: int) -> tuple[int, int, int] | None:
    """The earliest time of day at or after hour:minute:usec the spec matches."""
    h = _next_in(spec.hour, hour, 23)
    while h is not None:
        m = _next_in(spec.minute, minute if h == hour else 0, 59)
        while m is not None:
            u = _next_in(spec.usec, usec if (h, m) == (hour, minute) else 0, 60 * USEC - 1)
            if u is not None:
                return h, m, u
            m = _next_in(spec.minute, m + 1, 59)
        h = _next_in(spec.hour, h + 1, 23)
    return None


def next_elapse(spec: Spec, after: datetime) -> datetime | None:
    """When the timer fires next after `after` (naive, in the spec's zone); None: never again."""
    after += timedelta(microseconds=1)
    year = _next_in(spec.year, after.year, MAX_YEAR)
    while year is not None:
        month = _next_in(spec.month, after.month if year == after.year else 1, 12)
        while month is not None:
            this_month = (year, month) == (after.year, after.month)
            last = calendar.monthrange(year, month)[1]
            day = _next_in(_days(spec, year, month), after.day if this_month else 1, last)
            while day is not None:
                today = this_month and day == after.day
                if spec.weekdays >> calendar.weekday(year, month, day) & 1:
                    start = (after.hour, after.minute, after.second * USEC + after.microsecond) if today else (0, 0, 0)
                    found = _time_from(spec, *start)
                    if found is not None:
                        return datetime(year, month, day, found[0], found[1], found[2] // USEC, found[2] % USEC)
                day = _next_in(_days(spec, year, month), day + 1, last)
            month = _next_in(spec.month, month + 1, 12)
        year = _next_in(spec.year, year + 1, MAX_YEAR)
    return None


def now_in(spec: Spec) -> datetime:
    """The current time in the spec's zone, naive (what next_elapse counts from)."""
    if spec.zone is None:
        return datetime.now()  # the machine's local time: what systemd uses
    try:
        zone = zoneinfo.ZoneInfo(spec.zone)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return datetime.now()  # a zone file Python cannot load: local time is close
    return datetime.now(zone).replace(tzinfo=None)
