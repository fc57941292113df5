"""The evaluator's semantics on hand-written Graphite answers (graphite-web ends a render with a null
point while the newest bucket is open)."""

from __future__ import annotations

import math
from typing import Any

from tests.monitoring.grafana_eval import evaluate, reduce, threshold


def rule(reducer: str, op: str, limit: float, mode: str | None, no_data: str = "OK") -> dict[str, Any]:
    settings = {"settings": {"mode": mode}} if mode else {}
    return {
        "noDataState": no_data,
        "data": [
            {"refId": "A", "relativeTimeRange": {"from": 600, "to": 0}, "model": {"target": "x"}},
            {"refId": "B", "model": {"type": "reduce", "reducer": reducer, **settings}},
            {"refId": "C", "model": {"conditions": [{"evaluator": {"type": op, "params": [limit]}}]}},
        ],
    }


def answer(*values: float | None) -> list[dict[str, Any]]:
    return [{"target": "x", "datapoints": [[v, 1000 + 10 * i] for i, v in enumerate(values)]}]


def test_strict_max_of_a_window_ending_in_null_is_nan_and_never_fires() -> None:
    hot = answer(85.0, 91.0, None)
    assert math.isnan(reduce("max", [85.0, 91.0, None]))
    assert evaluate(rule("max", "gt", 80, None), lambda t, s: hot).state == "Normal"
    assert evaluate(rule("max", "gt", 80, "dropNN"), lambda t, s: hot).state == "Alerting"


def test_a_stopped_fan_fires_only_when_non_numbers_are_dropped() -> None:
    stopped = answer(1200.0, 0.0, 0.0, None)
    assert evaluate(rule("min", "lt", 300, None), lambda t, s: stopped).state == "Normal"
    assert evaluate(rule("min", "lt", 300, "dropNN"), lambda t, s: stopped).state == "Alerting"


def test_strict_last_is_the_null_and_drop_gives_the_newest_number() -> None:
    assert math.isnan(reduce("last", [70.0, 90.0, None]))
    assert reduce("last", [70.0, 90.0, None], "dropNN") == 90.0


def test_silence_counts_zero_numbers_and_a_missing_series_is_no_data() -> None:
    silent = answer(None, None, None)
    assert evaluate(rule("count", "lt", 1, "dropNN", "Alerting"), lambda t, s: silent).state == "Alerting"
    assert evaluate(rule("count", "lt", 1, "dropNN", "Alerting"), lambda t, s: answer(3.0, None)).state == "Normal"
    assert evaluate(rule("count", "lt", 1, "dropNN", "Alerting"), lambda t, s: []).state == "Alerting"
    assert evaluate(rule("max", "gt", 1, "dropNN", "OK"), lambda t, s: []).state == "Normal"
    assert evaluate(rule("max", "gt", 1, "dropNN", "NoData"), lambda t, s: []).state == "NoData"


def test_nan_crosses_no_threshold() -> None:
    assert not threshold("gt", math.nan, 0) and not threshold("lt", math.nan, 0)
    assert math.isnan(reduce("max", [], "dropNN"))


def test_any_series_firing_fires_the_rule() -> None:
    two = [*answer(10.0, 11.0), {"target": "y", "datapoints": [[95.0, 1000], [None, 1010]]}]
    result = evaluate(rule("max", "gt", 80, "dropNN"), lambda t, s: two)
    assert result.state == "Alerting" and result.values == (11.0, 95.0)
