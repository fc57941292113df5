"""A small evaluator of Grafana alert rules (the provisioning format render/alerts.py writes), for the
tests: Grafana itself cannot be installed here.

It follows Grafana's source, not its UI:
- pkg/tsdb/graphite: every `null` datapoint of a render answer becomes a nil value;
- pkg/expr/mathexp/reduce.go: `min`/`max`/`sum`/`mean` return NaN when any value is nil or NaN, and
  for an empty series; `count` is the number of values; `last` is the last value (NaN when empty). With
  `settings.mode: dropNN` (ReduceModeDrop, pkg/apis/query/v0alpha1/expressions/reduce.go) the
  DropNonNumber mapper first removes nil, NaN and Inf values;
- pkg/expr/threshold.go: `gt`/`lt` compare the reduced number, `outside_range`/`within_range` a range
  with both ends excluded; NaN compares false;
- pkg/services/ngalert: a query that returns no series is NoData, mapped by the rule's noDataState
  (OK -> Normal, Alerting -> Alerting, NoData -> NoData); otherwise the rule is Alerting when any
  series' condition is true. `evaluate` gives that one tick's outcome.
- the pending period (`for`) and the no-data / error states over successive ticks (`Instance`), as
  Grafana documents them: https://grafana.com/docs/grafana/latest/alerting/fundamentals/alert-rule-evaluation/
  (Normal -> Pending while the condition holds for less than the pending period, -> Alerting once it
  has held that long; any tick where it does not hold goes back to Normal) and
  https://grafana.com/docs/grafana/latest/alerting/fundamentals/alert-rule-evaluation/nodata-and-error-states/
  (noDataState / execErrState: `Alerting` goes through Pending like a breach, `NoData` / `Error` also
  honour the pending period before entering that state, `OK` is Normal at once, `KeepLast` keeps the
  current state). `keep_firing_for` (Recovering) is not modelled: no rule here sets it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Render = Callable[[str, int], list[dict[str, Any]]]  # (target, seconds back) -> graphite-web JSON


def _numbers(values: list[float | None], mode: str | None) -> list[float | None]:
    if mode == "dropNN":
        return [v for v in values if v is not None and math.isfinite(v)]
    return values


def reduce(reducer: str, values: list[float | None], mode: str | None = None) -> float:
    kept = _numbers(values, mode)
    if reducer == "count":
        return float(len(kept))
    if reducer == "last":
        last = kept[-1] if kept else None
        return math.nan if last is None else last
    if not kept or any(v is None or math.isnan(v) for v in kept):
        return math.nan
    numbers = [float(v) for v in kept if v is not None]
    table = {"max": max, "min": min, "sum": sum, "mean": lambda xs: sum(xs) / len(xs)}
    return float(table[reducer](numbers))


def threshold(op: str, value: float, limit: float, upper: float | None = None) -> bool:
    """pkg/expr/threshold.go: gt, lt; outside_range [limit, upper] is `value < limit || value > upper`,
    within_range `value > limit && value < upper` (both ends excluded)."""
    if math.isnan(value):
        return False
    if op == "outside_range":
        return value < limit or value > float(upper if upper is not None else limit)
    if op == "within_range":
        return limit < value < float(upper if upper is not None else limit)
    return value > limit if op == "gt" else value < limit


@dataclass(frozen=True)
class Result:
    state: str  # Normal | Alerting | NoData | Error: the tick's outcome, as if `for` were 0
    values: tuple[float, ...]  # the reduced number of each series
    outcome: str = "breach"  # breach | normal | nodata | error: what the tick found, before mapping


NO_DATA = {"OK": "Normal", "Alerting": "Alerting", "NoData": "NoData"}


ERROR = {"OK": "Normal", "Alerting": "Alerting", "Error": "Error"}


def evaluate(rule: dict[str, Any], render: Render) -> Result:
    queries = {q["refId"]: q for q in rule["data"]}
    query = queries["A"]
    try:
        series = render(query["model"]["target"], int(query["relativeTimeRange"]["from"]))
    except OSError:  # the data source did not answer (Grafana: a query error)
        return Result(ERROR.get(rule.get("execErrState", "Error"), "KeepLast"), (), "error")
    if not series:
        return Result(NO_DATA.get(rule["noDataState"], "KeepLast"), (), "nodata")
    reduce_model = queries["B"]["model"]
    condition = queries["C"]["model"]["conditions"][0]["evaluator"]
    mode = (reduce_model.get("settings") or {}).get("mode")
    values = tuple(reduce(reduce_model["reducer"], [v for v, _ts in s["datapoints"]], mode) for s in series)
    params = [float(p) for p in condition["params"]]
    firing = any(threshold(condition["type"], v, *params[:2]) for v in values)
    return Result("Alerting" if firing else "Normal", values, "breach" if firing else "normal")


def seconds(duration: str) -> float:
    """A Grafana duration (`0s`, `90s`, `2m`, `1h`, `1h30m`) in seconds."""
    parts = re.findall(r"(\d+)([smhd])", duration)
    if not parts or "".join(n + u for n, u in parts) != duration:
        raise ValueError(f"not a duration: {duration!r}")
    return float(sum(int(n) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[u] for n, u in parts))


@dataclass
class Instance:
    """One rule's alert instance over successive evaluations: feed it each tick's Result and the
    time of that tick; `state` is Normal, Pending, Alerting, NoData or Error."""

    rule: dict[str, Any]
    state: str = "Normal"
    pending_since: float | None = None
    pending_for: str | None = None  # the state Pending leads to

    def step(self, result: Result, now: float) -> str:
        target = result.state  # Normal, Alerting, NoData, Error or KeepLast (what the tick maps to)
        if target == "KeepLast":
            return self.state
        if target == "Normal":
            self.state, self.pending_since, self.pending_for = "Normal", None, None
            return self.state
        if self.state == target:
            return self.state
        wait = seconds(self.rule["for"])
        if self.state == "Pending" and self.pending_for == target and self.pending_since is not None:
            if now - self.pending_since >= wait:
                self.state, self.pending_since, self.pending_for = target, None, None
            return self.state
        if wait == 0:
            self.state = target
        else:
            self.state, self.pending_since, self.pending_for = "Pending", now, target
        return self.state
