"""The evaluator's semantics on hand-written Graphite answers (graphite-web ends a render with a null
point while the newest bucket is open)."""

from __future__ import annotations

import math
from typing import Any

import yaml

from tests.monitoring.grafana_eval import ERROR, NO_DATA, Instance, evaluate, reduce, seconds, threshold


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


def ticks(instance: Instance, answers: list[list[dict[str, Any]] | None], every: float = 60) -> list[str]:
    """The instance's state after each tick (one per `every` seconds); None: the query failed."""

    def render_of(found: list[dict[str, Any]] | None) -> Any:
        def render(target: str, back: int) -> list[dict[str, Any]]:
            if found is None:
                raise ConnectionRefusedError("graphite-web is down")
            return found

        return render

    return [instance.step(evaluate(instance.rule, render_of(a)), i * every) for i, a in enumerate(answers)]


def test_a_breach_is_pending_until_it_has_held_for_the_pending_period() -> None:
    hot, cool = answer(91.0, None), answer(60.0, None)
    two_minutes = {**rule("max", "gt", 80, "dropNN"), "for": "2m"}
    assert ticks(Instance(two_minutes), [cool, hot, hot, hot, hot]) == [
        "Normal", "Pending", "Pending", "Alerting", "Alerting",
    ]  # fmt: skip
    # a tick below the limit while pending starts the wait over
    assert ticks(Instance(two_minutes), [hot, hot, cool, hot, hot, hot]) == [
        "Pending", "Pending", "Normal", "Pending", "Pending", "Alerting",
    ]  # fmt: skip
    assert ticks(Instance({**two_minutes, "for": "0s"}), [cool, hot, cool]) == ["Normal", "Alerting", "Normal"]


def test_no_data_and_errors_follow_the_configured_states() -> None:
    base = {**rule("min", "lt", 300, "dropNN", "Alerting"), "for": "1m", "execErrState": "Error"}
    # noDataState Alerting: a vanished series goes through Pending to Alerting, like a breach
    assert ticks(Instance(base), [answer(900.0), [], [], []]) == ["Normal", "Pending", "Alerting", "Alerting"]
    # noDataState NoData / execErrState Error honour the pending period too
    assert ticks(Instance({**base, "noDataState": "NoData"}), [[], [], []]) == ["Pending", "NoData", "NoData"]
    assert ticks(Instance(base), [answer(900.0), None, None, answer(900.0)]) == [
        "Normal", "Pending", "Error", "Normal",
    ]  # fmt: skip
    # OK: Normal at once; KeepLast: whatever the instance was
    assert ticks(Instance({**base, "noDataState": "OK"}), [answer(0.0), answer(0.0), answer(0.0), []]) == [
        "Pending", "Alerting", "Alerting", "Normal",
    ]  # fmt: skip
    keep = {**base, "noDataState": "KeepLast", "execErrState": "KeepLast"}
    assert ticks(Instance(keep), [answer(0.0), answer(0.0), [], None, answer(900.0)]) == [
        "Pending", "Alerting", "Alerting", "Alerting", "Normal",
    ]  # fmt: skip


def test_every_rendered_rule_has_a_pending_period_and_states_the_evaluator_knows(example_rendering: Any) -> None:
    rules = yaml.safe_load(example_rendering.files["monitoring/grafana/provisioning/alerting/rules.yaml"])
    for r in rules["groups"][0]["rules"]:
        assert seconds(r["for"]) >= 0 and r["noDataState"] in NO_DATA and r["execErrState"] in ERROR, r["uid"]


def test_outside_and_within_range_exclude_their_ends() -> None:
    # pkg/expr/threshold.go: outside_range is value < min || value > max; within_range min < value < max
    assert threshold("outside_range", 639.0, 639.5, 640.5) and threshold("outside_range", 641.0, 639.5, 640.5)
    assert not threshold("outside_range", 640.0, 639.5, 640.5) and not threshold("outside_range", math.nan, 0, 1)
    assert threshold("within_range", 1.0, 0, 2) and not threshold("within_range", 2.0, 0, 2)
    state = {**rule("last", "outside_range", 639.5, "dropNN"), "for": "0s"}
    state["data"][2]["model"]["conditions"][0]["evaluator"]["params"] = [639.5, 640.5]
    assert evaluate(state, lambda t, s: answer(640.0, 640.0, None)).state == "Normal"
    assert evaluate(state, lambda t, s: answer(640.0, 896.0, None)).state == "Alerting"  # a new bit set
    assert evaluate(state, lambda t, s: answer(896.0, 640.0, None)).state == "Normal"  # and back
