"""Issue 29's alert quality, on the real graphite-web: every BMC rule of every corpus board evaluated the
way Grafana 11.4 evaluates it (tests/monitoring/grafana_eval.py) over a simulated day of each board.

Whisper files are written directly (the day at 1-minute points, the last 20 minutes at 10 s, as carbon
would store them) under one host per board and scenario; one graphite-web answers every rule's query.
- a normal day (each sensor at its listing's reading, a daily swing and noise): no rule fires, at noon
  or at the end of the day;
- each rule fires when its condition holds, after its pending period (two ticks `for` apart): the rules'
  series over their upper limit, under their lower limit, risen above (or drifted off) their day median,
  silent for 6 minutes, a discrete sensor's states changed, a critical SEL entry;
- flapping: a fan touching 0 RPM every other minute fires its rule (its minimum over the window is 0); a
  state that changed and came back resolves.
"""

from __future__ import annotations

import json
import math
import random
import re
import shutil
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from homelab.monitoring.series import escape
from homelab.monitoring.states import bit
from tests.conftest import EXAMPLE_SECRETS, missing, write_secret
from tests.monitoring import e2e_support as e2e
from tests.monitoring import grafana_eval
from tests.monitoring.alert_coverage import BOARDS, Covered, board_inventory, coverage, rules_for

pytestmark = pytest.mark.real

DAY = 86400
FINE = (10, 120)  # 10 s points for 20 minutes
# 1 min points for 2 days: movingMedian's day before the earliest tick's window (a shorter file would
# clamp graphite-web's fetch of that day and misalign the median, which a real file of 5 years never does)
COARSE = (60, 2 * 1440)
SCENARIOS = ("normal", "high", "low", "baseline", "silent", "state", "flap")
# which rules each scenario must fire (uid pattern)
FIRES = {
    "high": r"-high$", "low": r"-low$", "baseline": r"-baseline$", "silent": r"^silent-",
    "state": r"^state-|^sel-critical$",
}  # fmt: skip
BREACH = 17 * 60  # how long a breach has lasted at the last tick (the window, then `for` up to 5 minutes)


@dataclass
class Board:
    name: str
    sensors: list[Covered]
    rules: list[dict[str, Any]]


@dataclass
class Quality:
    web: e2e.GraphiteWeb
    boards: dict[str, Board]
    now: int


def _normal(c: Covered, t: int, rng: random.Random) -> float:
    """A day's reading: the listing's, a daily swing and some noise (states stay as discovered)."""
    swing = math.sin(2 * math.pi * t / DAY)
    if c.kind == "discrete":
        return c.normal
    if c.kind == "temperature":
        return c.normal + 2 * swing + rng.uniform(-0.5, 0.5)
    if c.kind == "voltage":
        return c.normal * (1 + 0.003 * swing + rng.uniform(-0.001, 0.001))
    if c.kind == "fan":
        return c.normal * (1 + 0.03 * swing + rng.uniform(-0.01, 0.01))
    return c.normal * (1 + 0.1 * swing + rng.uniform(-0.02, 0.02))  # power, current


def _limit(rule: dict[str, Any]) -> float:
    return float(rule["data"][2]["model"]["conditions"][0]["evaluator"]["params"][0])


def _breaching(scenario: str, rules: list[dict[str, Any]], c: Covered) -> Callable[[float], float | None] | None:
    """What the series of `c` reads during the breach of `scenario` (given its normal reading), or None
    when the scenario leaves it alone."""
    own = [r for r in rules if r["uid"] in c.rules]
    pick = {"high": "-high", "low": "-low", "baseline": "-baseline"}.get(scenario)
    if pick:
        rule = next((r for r in own if r["uid"].endswith(pick)), None)
        if rule is None:
            return None
        limit = _limit(rule)
        if scenario == "high":
            return lambda v: limit + abs(limit) * 0.02 + 1
        if scenario == "low":
            return lambda v: limit - abs(limit) * 0.02 - 0.1 if limit > 0 else limit * 1.1 - 0.1
        return lambda v: v + limit * 1.5 + 1
    if scenario == "silent":
        return lambda v: None
    if scenario == "state" and c.kind == "discrete":
        return lambda v: float(int(v) ^ bit(3))
    return None


def _touched(scenario: str, rules: list[dict[str, Any]], c: Covered) -> bool:
    flapping = scenario == "flap" and c.kind in ("fan", "discrete")
    return flapping or _breaching(scenario, rules, c) is not None


def _file(storage: Path, path: str) -> Path:
    return storage / "whisper" / (path.replace(".", "/") + ".wsp")


def _write(storage: Path, path: str, points: list[tuple[int, float]], method: str) -> None:
    import whisper  # type: ignore[import-untyped]

    file = _file(storage, path)
    file.parent.mkdir(parents=True, exist_ok=True)
    whisper.create(str(file), [FINE, COARSE], xFilesFactor=0, aggregationMethod=method)
    whisper.update_many(str(file), points)


def _series(c: Covered, scenario: str, rules: list[dict[str, Any]], now: int, rng: random.Random) -> list[
        tuple[int, float]]:  # fmt: skip
    breach = _breaching(scenario, rules, c)
    found: list[tuple[int, float]] = []
    fine = now - FINE[0] * FINE[1] + 30
    # a point a minute older than the 10 s archive, then every 10 s
    for t in [*range((now - DAY - 90 * 60) // 60 * 60, fine, 60), *range(fine, now + 1, 10)]:
        value: float | None = _normal(c, t, rng)
        if breach and t > now - BREACH:
            value = breach(value or 0.0)
        if scenario == "flap" and c.kind == "fan" and t > now - BREACH and (t // 60) % 2:
            value = 0.0
        if scenario == "flap" and c.kind == "discrete" and now - 8 * 60 < t <= now - 7 * 60:
            value = float(int(c.normal) ^ bit(3))
        if value is not None:
            found.append((t, value))
    return found


def _method(c: Covered) -> str:
    """carbon's aggregation of the series (render/graphite.py's storage-aggregation.conf)."""
    return {"temperature": "max", "fan": "min", "discrete": "last"}.get(c.kind, "average")


@pytest.fixture(scope="module")
def quality(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Quality]:
    try:
        import graphite  # type: ignore[import-untyped]  # noqa: F401
        import whisper  # type: ignore[import-untyped]  # noqa: F401
    except ImportError as exc:
        missing(f"python package {exc.name!r} (scripts/pip/monitoring.txt)")
    base = tmp_path_factory.mktemp("alert-quality")
    project = base / "project" / "homelab.yaml"
    shutil.copytree(Path(__file__).parent.parent.parent / "examples", project.parent)
    for secret in EXAMPLE_SECRETS:
        write_secret(project.parent / "secrets" / secret, "x")
    storage = base / "storage"
    now = int(time.time()) // 60 * 60
    rng = random.Random(29)  # noqa: S311 - noise for simulated readings, the same each run
    boards = {}
    t0 = time.monotonic()
    for name in BOARDS:
        sensors = coverage(project, name)
        rules = [r for r in rules_for(project, name, board_inventory(name))
                 if re.search(r"\.(ipmi|bmc_state|bmc_sel)\.", r["data"][0]["model"]["target"])]  # fmt: skip
        boards[name] = Board(name, sensors, rules)
        for scenario in SCENARIOS:
            host = f"{escape(name)}_{scenario}"
            for c in sensors:
                path = c.path.replace(f"collectd.{escape(name)}.", f"collectd.{host}.", 1)
                if scenario != "normal" and not _touched(scenario, rules, c):  # the normal day's file
                    normal = c.path.replace(f"collectd.{escape(name)}.", f"collectd.{escape(name)}_normal.", 1)
                    _file(storage, path).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(_file(storage, normal), _file(storage, path))
                    continue
                _write(storage, path, _series(c, scenario, rules, now, rng), _method(c))
            for instance in ("new", "critical"):
                value = 1.0 if scenario == "state" and instance == "critical" else 0.0
                sel = [(t, value if t > now - BREACH else 0.0) for t in range(now - BREACH - 600, now + 1, 10)]
                _write(storage, f"collectd.{host}.bmc_sel.count-{instance}", sel, "max")
    print(f"[quality {time.monotonic() - t0:5.1f}s] whisper files written")
    web = e2e.GraphiteWeb(base / "web", storage, None)
    try:
        web.wait_ready()
        print(f"[quality {time.monotonic() - t0:5.1f}s] graphite-web up")
        yield Quality(web, boards, now)
    finally:
        web.stop()


def _answers(web: e2e.GraphiteWeb, targets: list[str], seconds: int, until: int) -> dict[str, list[dict[str, Any]]]:
    """Every target's render answer (null points kept), from one POST per window."""
    params = [("target", f"alias({t},'q{i}')") for i, t in enumerate(targets)]
    params += [("from", str(until - seconds)), ("until", str(until)), ("format", "json")]
    request = urllib.request.Request(f"{web.url}/render", data=urllib.parse.urlencode(params).encode())  # noqa: S310
    with urllib.request.urlopen(request, timeout=120) as response:  # noqa: S310 - loopback
        answer = json.loads(response.read())
    by_name = {series["target"]: series for series in answer}
    return {t: [by_name[f"q{i}"]] if f"q{i}" in by_name else [] for i, t in enumerate(targets)}


def _evaluate(q: Quality, board: Board, scenario: str, until: int, only: str = "") -> dict[str, grafana_eval.Result]:
    """The board's rules (those whose uid matches `only`), pointed at the scenario's host, evaluated at
    `until`."""
    host = f"collectd.{escape(board.name)}_{scenario}."
    chosen = [r for r in board.rules if re.search(only, r["uid"])]
    rules = [json.loads(json.dumps(r).replace(f"collectd.{escape(board.name)}.", host)) for r in chosen]
    results = {}
    for seconds in sorted({int(r["data"][0]["relativeTimeRange"]["from"]) for r in rules}):
        group = [r for r in rules if int(r["data"][0]["relativeTimeRange"]["from"]) == seconds]
        answers = _answers(q.web, [r["data"][0]["model"]["target"] for r in group], seconds, until)
        for r in group:
            results[r["uid"]] = grafana_eval.evaluate(r, lambda target, _s, found=answers: found[target])
    return results


def test_a_normal_day_fires_no_rule_on_any_board(quality: Quality) -> None:
    firing: dict[str, list[str]] = {}
    count = 0
    for board in quality.boards.values():
        for hours in (12, 0):
            results = _evaluate(quality, board, "normal", quality.now - hours * 3600)
            count += len(results)
            bad = [uid for uid, r in results.items() if r.outcome != "normal"]
            if bad:
                firing[f"{board.name} at -{hours}h"] = bad
    print(f"{count} evaluations of {sum(len(b.rules) for b in quality.boards.values())} rules over a normal day")
    assert not firing


@pytest.mark.parametrize("scenario", list(FIRES))
def test_every_rule_fires_when_its_condition_holds(quality: Quality, scenario: str) -> None:
    silent: dict[str, list[str]] = {}
    fired = 0
    for board in quality.boards.values():
        expected = [r for r in board.rules if re.search(FIRES[scenario], r["uid"])]
        first = _evaluate(quality, board, scenario, quality.now - 300, FIRES[scenario])
        last = _evaluate(quality, board, scenario, quality.now, FIRES[scenario])
        for rule in expected:
            instance = grafana_eval.Instance(rule)
            instance.step(first[rule["uid"]], quality.now - 300)
            if instance.step(last[rule["uid"]], quality.now) != "Alerting":
                silent.setdefault(board.name, []).append(rule["uid"])
            else:
                fired += 1
    print(f"{scenario}: {fired} rules fired")
    assert fired and not silent


def test_flapping(quality: Quality) -> None:
    for board in quality.boards.values():
        results = _evaluate(quality, board, "flap", quality.now, r"^fanspeed-.*-low$|^state-")
        fans = [uid for uid in results if uid.startswith("fanspeed-")]
        assert all(results[uid].state == "Alerting" for uid in fans), board.name
        states = [uid for uid in results if uid.startswith("state-")]
        assert all(results[uid].state == "Normal" for uid in states), board.name
        back = _evaluate(quality, board, "flap", quality.now - 7 * 60 - 30, "^state-")  # while it was changed
        assert all(back[uid].state == "Alerting" for uid in states), board.name


def test_a_sensor_in_fahrenheit_is_converted_by_graphite_web(quality: Quality) -> None:
    """A BMC that reads °F: the query every panel and rule uses (Series.target) gives °C from the real
    graphite-web, and the °C limit of the inventory compares with that."""
    from homelab.monitoring.series import Series

    series = Series("units", "ipmi", "", "temperature", "cpu_temp", None, "temperature", "CPU", fahrenheit=True)
    now = int(time.time()) // 10 * 10
    _write(quality.web.root.parent / "storage", series.path, [(t, 185.0) for t in range(now - 600, now, 10)], "max")
    answer = e2e.points(quality.web.render(series.target, "-10min"))
    assert answer and all(abs(v - 85.0) < 0.01 for _ts, v in answer)  # 185 °F
