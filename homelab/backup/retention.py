"""Which snapshots to keep: the newest in each of the last N hours, days and months. Pure, clock-injected.

A snapshot is kept when it is the newest of its hour among the last `hourly` hours (counting the hour of
`now`), the newest of its day among the last `daily` days, or the newest of its month among the last
`monthly` months; or when it is protected (a running backup reads it, or the last successful backup was
taken from it). Everything else with our prefix is pruned; snapshots we did not make are never listed.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

PREFIX = "homelab-"
STAMP = "%Y%m%dT%H%M%SZ"


@dataclass(frozen=True)
class Policy:
    hourly: int
    daily: int
    monthly: int


def snapshot_name(when: datetime) -> str:
    return PREFIX + when.astimezone(UTC).strftime(STAMP)


@functools.lru_cache(maxsize=65536)
def snapshot_time(name: str) -> datetime | None:
    """The time encoded in one of our snapshot names (`homelab-20250101T030000Z[-n]`), else None."""
    if not name.startswith(PREFIX):
        return None
    stamp = name[len(PREFIX) :].split("-", 1)[0]
    if len(stamp) != 16 or stamp[8] != "T" or stamp[15] != "Z" or not (stamp[:8] + stamp[9:15]).isdigit():
        return None
    try:
        return datetime(
            int(stamp[:4]),
            int(stamp[4:6]),
            int(stamp[6:8]),
            int(stamp[9:11]),
            int(stamp[11:13]),
            int(stamp[13:15]),
            tzinfo=UTC,
        )
    except ValueError:
        return None


def _month_index(t: datetime) -> int:
    return t.year * 12 + t.month - 1


def keep_set(names: Iterable[str], policy: Policy, now: datetime, protected: Iterable[str] = ()) -> set[str]:
    dated = sorted(((snapshot_time(n), n) for n in names if snapshot_time(n) is not None), reverse=True)
    now = now.astimezone(UTC)
    keep = set(protected) & {n for _, n in dated}
    hour0 = now.replace(minute=0, second=0, microsecond=0)
    day0 = now.date()
    month0 = _month_index(now)
    newest: dict[tuple[str, int], str] = {}
    for when, name in dated:  # newest first: the first seen in a bucket is its newest
        assert when is not None
        buckets = (
            ("h", int((hour0 - when.replace(minute=0, second=0, microsecond=0)) / timedelta(hours=1))),
            ("d", (day0 - when.date()).days),
            ("m", month0 - _month_index(when)),
        )
        for kind, age in buckets:
            limit = {"h": policy.hourly, "d": policy.daily, "m": policy.monthly}[kind]
            if 0 <= age < limit and (kind, age) not in newest:
                newest[(kind, age)] = name
    return keep | set(newest.values())


def to_prune(names: Iterable[str], policy: Policy, now: datetime, protected: Iterable[str] = ()) -> list[str]:
    """Our snapshots not kept by the policy, oldest first. Snapshots from the future are kept."""
    names = list(names)
    keep = keep_set(names, policy, now, protected)
    ours = [(snapshot_time(n), n) for n in names if snapshot_time(n) is not None]
    return [n for when, n in sorted(ours) if n not in keep and when is not None and when <= now]
