"""A small evaluator of Grafana alert rules (the provisioning format render/alerts.py writes), for the
tests: Grafana itself cannot be installed here.

It follows Grafana's source, not its UI:
- pkg/tsdb/graphite: every `null` datapoint of a render answer becomes a nil value;
- pkg/expr/mathexp/reduce.go: `min`/`max`/`sum`/`mean` return NaN when any value is nil or NaN, and
  for an empty series; `count` is the number of values; `last` is the last value (NaN when empty). With
  `settings.mode: dropNN` (ReduceModeDrop, pkg/apis/query/v0alpha1/expressions/reduce.go) the
  DropNonNumber mapper first removes nil, NaN and Inf values;
- pkg/expr/threshold.go: `gt`/`lt` compare the reduced number; NaN compares false;
- pkg/services/ngalert: a query that returns no series is NoData, mapped by the rule's noDataState
  (OK -> Normal, Alerting -> Alerting, NoData -> NoData); otherwise the rule is Alerting when any
  series' condition is true. The `for` pending period is not modelled: the result is the state the
  rule evaluates to at one tick.
"""

from __future__ import annotations

import math
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


def threshold(op: str, value: float, limit: float) -> bool:
    if math.isnan(value):
        return False
    return value > limit if op == "gt" else value < limit


@dataclass(frozen=True)
class Result:
    state: str  # Normal | Alerting | NoData
    values: tuple[float, ...]  # the reduced number of each series


NO_DATA = {"OK": "Normal", "Alerting": "Alerting", "NoData": "NoData"}


def evaluate(rule: dict[str, Any], render: Render) -> Result:
    queries = {q["refId"]: q for q in rule["data"]}
    query = queries["A"]
    series = render(query["model"]["target"], int(query["relativeTimeRange"]["from"]))
    if not series:
        return Result(NO_DATA[rule["noDataState"]], ())
    reduce_model = queries["B"]["model"]
    condition = queries["C"]["model"]["conditions"][0]["evaluator"]
    mode = (reduce_model.get("settings") or {}).get("mode")
    values = tuple(reduce(reduce_model["reducer"], [v for v, _ts in s["datapoints"]], mode) for s in series)
    firing = any(threshold(condition["type"], v, float(condition["params"][0])) for v in values)
    return Result("Alerting" if firing else "Normal", values)
