"""Issue 12's proof: BMCs simulated from published listings, discovered, rendered and collected.

For each board below, an ipmi_sim BMC is built from the listing itself (tests/monitoring/corpus_bmc.py,
its own reader of the listing's text). Then, as a user would: `discover` (real ipmitool over RMCP+)
writes the inventory; the stack is rendered from it; one collectd per board (the rendered collectd.conf,
its BMC part and heartbeat) sends to one carbon-cache; graphite-web answers the dashboards' and alert
rules' queries; the alert rules are evaluated with Grafana's semantics (tests/monitoring/grafana_eval.py).
One pipeline for every board keeps the suite's time modest.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from homelab.config.loader import load
from homelab.layout import COLLECTD_IPMI_SECRET as IPMI_SECRET
from homelab.monitoring.catalog_builder import catalog_for
from homelab.monitoring.discover import bmc_reader, discover_into
from homelab.monitoring.series import Catalog
from homelab.plan import build_plan
from homelab.render import Rendering, render_all
from homelab.render.collectd import collectd_conf
from tests.conftest import EXAMPLE, EXAMPLE_SECRETS, find_program, missing, write_secret
from tests.monitoring import alert_coverage, corpus_bmc, grafana_eval
from tests.monitoring import e2e_support as e2e

pytestmark = pytest.mark.real

CORPUS = alert_coverage.CORPUS
INTERVAL = 5
BOARDS = alert_coverage.BOARDS  # board (its collectd host name) -> the listings it is built from
GONE = ("dell-r720", "Fan6")  # discovered, then missing from the BMC when collection starts


@dataclass
class Board:
    name: str
    rows: list[corpus_bmc.Row]
    bmc: corpus_bmc.CorpusBmc
    catalog: Catalog
    rendering: Rendering
    config: Path

    def rules(self) -> list[dict[str, Any]]:
        """The BMC's rules: its analog sensors', its discrete sensors' and the SEL's."""
        rules = yaml.safe_load(self.rendering.files["monitoring/grafana/provisioning/alerting/rules.yaml"])
        bmc = re.compile(r"\.(ipmi|bmc_state|bmc_sel)\.")
        return [r for g in rules["groups"] for r in g["rules"] if bmc.search(r["data"][0]["model"]["target"])]

    def targets(self) -> list[str]:
        found = []
        for name, content in self.rendering.files.items():
            if name.startswith("monitoring/grafana/dashboards/"):
                found += [t["target"] for p in json.loads(content)["panels"] for t in p.get("targets", [])]
        return [t for t in found if ".ipmi." in t or ".bmc_state." in t]


@dataclass
class Pipeline:
    boards: dict[str, Board]
    web: e2e.GraphiteWeb
    collectds: list[e2e.Collectd]
    carbon: e2e.Carbon
    started: float = dataclasses.field(default_factory=time.time)

    def render(self, target: str, seconds: int) -> list[dict[str, Any]]:
        return self.web.render(target, f"-{seconds}s")


def _addresses(count: int) -> list[str]:
    """Loopback addresses where UDP 623 is free (collectd's ipmi plugin only talks to port 623)."""
    found = []
    for last in range(1, 250):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            try:
                s.bind((f"127.0.0.{last}", e2e.IPMI_PORT))
            except OSError:
                continue
        found.append(f"127.0.0.{last}")
        if len(found) == count:
            return found
    raise RuntimeError("not enough loopback addresses with UDP 623 free")


def _project(base: Path, name: str, address: str) -> Path:
    raw = yaml.safe_load(EXAMPLE.read_text())
    raw["server"]["hostname"] = name
    raw["monitoring"]["interval"] = INTERVAL
    raw["monitoring"]["ipmi"] = {
        "mode": "lan", "address": address, "username": e2e.BMC_USER, "password_file": "secrets/bmc",
        "cipher_suite": 3,  # ipmi_sim does not answer ipmitool's cipher suite query: skip its 10 s timeout
    }  # fmt: skip
    raw["monitoring"]["inventory"] = "inventory.yaml"
    project = base / name
    project.mkdir(parents=True)
    (project / "homelab.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    for secret in EXAMPLE_SECRETS:
        write_secret(project / "secrets" / secret, f"example-{secret}")
    write_secret(project / "secrets" / "bmc", e2e.BMC_PASSWORD)
    return project / "homelab.yaml"


def _wait_answering(bmc: corpus_bmc.CorpusBmc, ipmitool: str) -> None:
    def answers() -> bool:
        bmc.process.check_alive()
        argv = [ipmitool, "-I", "lanplus", "-H", bmc.address, "-p", "623", "-U", e2e.BMC_USER, "-P", e2e.BMC_PASSWORD,
                "-C", "3", "-N", "1", "-R", "1", "sdr", "list"]  # fmt: skip
        import subprocess

        done = subprocess.run(argv, capture_output=True, text=True, errors="replace", timeout=15,
                              check=False)  # fmt: skip
        return done.returncode == 0 and bmc.sensors[0].row.name in done.stdout

    e2e.wait_until(answers, 30, f"ipmi_sim {bmc.name} did not answer", step=0.5)


def _bmc_only(catalog: Catalog) -> Catalog:
    """The board's BMC sensors (analog: ipmi; discrete: python) and the heartbeat: the other plugins are
    the example's (proven by test_end_to_end.py) and would only cost time here."""
    keep = ("ipmi", "python", "uptime")
    return dataclasses.replace(
        catalog,
        plugins=tuple(p for p in catalog.plugins if p.name in keep),
        series=tuple(s for s in catalog.series if s.plugin in keep),
    )


def _start_board(name: str, address: str, base: Path, shared: Path, programs: dict[str, str], started: list[Any],
                 carbon: e2e.Carbon) -> tuple[Board, e2e.Collectd]:  # fmt: skip
    rows = corpus_bmc.board(*(CORPUS / f for f in BOARDS[name]))
    bmc = corpus_bmc.CorpusBmc(name, rows, base / "bmc" / name, address, programs)
    started.append(bmc)
    _wait_answering(bmc, programs["ipmitool"])
    config = _project(base / "projects", name, address)
    loaded = load(config)
    discover_into(loaded, bmc_reader(loaded), None)  # `homelab monitor discover`, real ipmitool
    if name == GONE[0]:  # the BMC loses a sensor after discovery
        bmc.stop()
        started.remove(bmc)
        rows = [r for r in rows if r.name != GONE[1]]
        bmc = corpus_bmc.CorpusBmc(name, rows, base / "bmc" / f"{name}-after", address, programs)
        started.append(bmc)
        _wait_answering(bmc, programs["ipmitool"])
    plan = build_plan(load(config))
    rendering = render_all(
        plan, {f"secrets/{s}": f"example-{s}" for s in (*EXAMPLE_SECRETS, "bmc")} | {"secrets/bmc": e2e.BMC_PASSWORD}
    )
    catalog = catalog_for(plan)
    include = shared / f"ipmi-{name}.conf"
    include.write_bytes(rendering.secret_files[IPMI_SECRET])
    include.chmod(0o600)
    (shared / "bmc_states.py").write_bytes(rendering.files["monitoring/collectd/bmc_states.py"])
    conf = base / f"collectd-{name}.conf"
    conf.write_text(
        collectd_conf(_bmc_only(catalog), carbon_port=carbon.line_port, socket=str(shared / f"{name}.sock"),
                      ipmi_include=str(include), python_module_dir=str(shared))
    )  # fmt: skip
    collectd = e2e.Collectd(programs["collectd"], conf, base / f"collectd-{name}.log")
    started.append(collectd)
    return Board(name, rows, bmc, catalog, rendering, config), collectd


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pipeline]:
    if os.geteuid() != 0:
        missing("root (collectd's ipmi plugin only talks to UDP port 623)")
    names = ("ipmi_sim", "sdrcomp", "ipmitool", "collectd", "carbon-cache")
    programs = {n: find_program(n) or missing(f"program {n!r}") or "" for n in names}
    try:
        import graphite  # type: ignore[import-untyped]  # noqa: F401
        import whisper  # type: ignore[import-untyped]  # noqa: F401
    except ImportError as exc:
        missing(f"python package {exc.name!r} (scripts/pip/monitoring.txt)")
    base = tmp_path_factory.mktemp("corpus-pipeline")
    shared = Path(tempfile.mkdtemp(prefix="homelab-corpus-"))
    started: list[Any] = []
    try:
        first = next(iter(BOARDS))
        rendered = render_all(build_plan(load(_project(base / "first", first, "127.0.0.1"))),
                              {f"secrets/{s}": "x" for s in (*EXAMPLE_SECRETS, "bmc")})  # fmt: skip
        carbon = e2e.Carbon.from_rendering(programs["carbon-cache"], base / "graphite", rendered.files)
        web = e2e.GraphiteWeb(base / "web", carbon.storage, carbon.query_port)
        started += [web, carbon]
        carbon.launch()
        carbon.wait_listening()
        boards, collectds = {}, []
        t0 = time.monotonic()
        for name, address in zip(BOARDS, _addresses(len(BOARDS)), strict=True):
            board, collectd = _start_board(name, address, base, shared, programs, started, carbon)
            boards[name] = board
            collectds.append(collectd)
            print(f"[corpus {time.monotonic() - t0:5.1f}s] {name}: simulated, discovered, collecting")
        web.wait_ready()
        print(f"[corpus {time.monotonic() - t0:5.1f}s] graphite-web up")
        yield Pipeline(boards, web, collectds, carbon)
    finally:
        for component in reversed(started):
            component.stop()
        shutil.rmtree(shared, ignore_errors=True)


def _with_data(pipe: Pipeline, targets: list[str]) -> set[str]:
    answers = pipe.web.render_many(targets, f"-{12 * INTERVAL}s")
    return {t for t, found in answers.items() if found}


def test_every_sensor_with_a_reading_is_on_a_dashboard_with_data(pipeline: Pipeline) -> None:
    """Each row of each listing that has a reading (but the one removed from the BMC) is drawn by a
    dashboard target named after it, and that target returns data."""
    expected: dict[str, list[str]] = {}
    for board in pipeline.boards.values():
        expected[board.name] = [r.name for r in board.rows]
    missing_now: dict[str, list[str]] = {}

    def all_there() -> bool:
        missing_now.clear()
        for board in pipeline.boards.values():
            live = _with_data(pipeline, board.targets())
            names = [t.rsplit(",'", 1)[1].rstrip("')") for t in live]
            absent = [n for n in expected[board.name] if names.count(n) < expected[board.name].count(n)]
            if absent:
                missing_now[board.name] = absent
        return not missing_now

    try:
        e2e.wait_until(all_there, 24 * INTERVAL, "sensors without data", step=2)
    except TimeoutError:
        pytest.fail(f"sensors of the listings without a dashboard target that returns data: {missing_now}")
    counts = {name: len(rows) for name, rows in expected.items()}
    print(f"sensors with data per board: {counts}")
    assert counts["hpe-dl360-gen9"] == 24 + 14 + 4 + 13  # temperatures, fans (percent), power, discrete
    assert counts["dell-r720"] == 4 + 5  # Fan6 removed
    assert counts["x8dtu-f"] == 7 + 9 + 4 + 2  # the two CPU temperatures are discrete on this old BMC
    assert counts["c2750d4i"] == 10 + 3 + 2 and counts["esc8000a-e12"] == 45 + 36


def _state(pipe: Pipeline, board: str, uid: str) -> grafana_eval.Result:
    rule = next(r for r in pipe.boards[board].rules() if r["uid"] == uid)
    return grafana_eval.evaluate(rule, pipe.render)


def _wait_pending(pipe: Pipeline, board: str, uid: str) -> float:
    """Evaluate the rule tick by tick as Grafana's state manager would (grafana_eval.Instance) until its
    condition holds: the instance is then Pending, since each sensor rule waits out its pending period
    (`for`) before Alerting (tests/monitoring/test_grafana_eval.py shows the rest of that path)."""
    rule = next(r for r in pipe.boards[board].rules() if r["uid"] == uid)
    instance, start = grafana_eval.Instance(rule), time.monotonic()

    def breached() -> bool:
        return instance.step(grafana_eval.evaluate(rule, pipe.render), time.monotonic()) != "Normal"

    e2e.wait_until(breached, 12 * INTERVAL, f"{board} {uid} never breached", step=1)
    took = time.monotonic() - start
    assert grafana_eval.seconds(rule["for"]) > took and instance.state == "Pending", (uid, rule["for"], took)
    return took


def test_every_sensor_with_a_reading_is_inside_an_alert_rule_with_data(pipeline: Pipeline) -> None:
    """Each row of each listing with a reading or states (but the one removed from the BMC) is read by a
    rule on its value (a limit, a baseline, a state change) besides its silent rule, and that rule's
    query returns numbers from the real collectd, carbon and graphite-web."""
    from homelab.monitoring import inventory
    from homelab.monitoring.discover import inventory_path

    watched: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for board in pipeline.boards.values():
        found = inventory.load(inventory_path(load(board.config)))
        rules = board.rules()
        for row, _entry, path in alert_coverage.series_of(board.name, board.rows, found):
            valued = [r for r in rules if alert_coverage.reads(r["data"][0]["model"]["target"], path)
                      and not r["uid"].startswith("silent")]  # fmt: skip
            assert valued, (board.name, row.name)
            watched.setdefault(board.name, []).append((row.name, valued[0]))
    without: dict[str, list[str]] = {}

    def all_with_data() -> bool:
        without.clear()
        for board, pairs in watched.items():
            for name, rule in pairs:
                if not grafana_eval.evaluate(rule, pipeline.render).values:
                    without.setdefault(board, []).append(name)
        return not without

    try:
        e2e.wait_until(all_with_data, 24 * INTERVAL, "rules without data", step=2)
    except TimeoutError:
        pytest.fail(f"sensors whose alert rule has no data: {without}")
    print(f"sensors inside a rule with data per board: { {b: len(p) for b, p in watched.items()} }")


def test_every_bmc_rule_evaluates_to_a_number_and_only_the_gone_sensor_alerts(pipeline: Pipeline) -> None:
    gone_board, gone = pipeline.boards[GONE[0]], GONE[1]
    results: dict[str, grafana_eval.Result] = {}

    def settled() -> bool:
        results.clear()
        for board in pipeline.boards.values():
            for rule in board.rules():
                results[f"{board.name}/{rule['uid']}"] = grafana_eval.evaluate(rule, pipeline.render)
        return all(r.values for key, r in results.items() if f"/{gone.lower()}" not in key.replace("-", "/"))

    e2e.wait_until(settled, 12 * INTERVAL, "rules without a value", step=2)
    alerting = sorted(key for key, r in results.items() if r.state != "Normal")
    gone_rules = sorted(f"{gone_board.name}/{r['uid']}" for r in gone_board.rules() if gone.lower() in r["uid"])
    assert gone_rules and alerting == gone_rules, (alerting, gone_rules)
    assert all(results[key].values == () for key in gone_rules)  # no series at all: NoData -> Alerting
    # its silent rule has no pending period: the instance alerts at the first tick, as Grafana's would
    silent = next(r for r in gone_board.rules() if r["uid"] == f"silent-fanspeed-{gone.lower()}")
    assert silent["for"] == "0s"
    assert grafana_eval.Instance(silent).step(results[f"{gone_board.name}/{silent['uid']}"], 0) == "Alerting"
    print(f"{len(results)} BMC rules evaluated; alerting: {alerting}")


def _drive(pipe: Pipeline, cases: list[tuple[str, str, str, float]]) -> None:
    """Set each (board, sensor) to its value at once, then wait until each rule (uid) fires."""
    changed = []
    try:
        for board, name, uid, value in cases:
            bmc = pipe.boards[board].bmc
            sensor = bmc.sensor(name)
            assert _state(pipe, board, uid).state == "Normal", (board, uid)
            changed.append((bmc, sensor, bmc.set(sensor, value)))
        for (board, name, uid, _value), (_bmc, _sensor, reported) in zip(cases, changed, strict=True):
            took = _wait_pending(pipe, board, uid)
            print(f"{board} {name} at {reported:g}: {uid} Pending after {took:.0f}s")
    finally:
        for bmc, sensor, _reported in changed:
            bmc.set(sensor, sensor.row.reading)


def test_a_fan_at_zero_fires_its_rule(pipeline: Pipeline) -> None:
    # X8DTU-F: the BMC's lower critical (540 RPM); R720: no BMC threshold, the configured floor
    _drive(pipeline, [("x8dtu-f", "Fan1", "fanspeed-fan1-low", 0), ("dell-r720", "Fan1", "fanspeed-fan1-low", 0)])


def test_a_temperature_over_its_upper_critical_fires_its_rule(pipeline: Pipeline) -> None:
    x8dtu = pipeline.boards["x8dtu-f"].bmc.sensor("System Temp").row.thresholds["uc"]
    hpe = pipeline.boards["hpe-dl360-gen9"].bmc.sensor("02-CPU 1").row.thresholds["uc"]
    assert (x8dtu, hpe) == (77.0, 70.0)  # as the listings print them
    _drive(
        pipeline,
        [
            ("x8dtu-f", "System Temp", "temperature-system-temp-high", x8dtu + 8),
            ("hpe-dl360-gen9", "02-CPU 1", "temperature-02-cpu-1-high", hpe + 8),
        ],
    )


def _last_number(pipe: Pipeline, target: str) -> float | None:
    answer = pipe.render(target, 6 * INTERVAL)
    numbers = [v for v, _ts in answer[0]["datapoints"] if v is not None] if answer else []
    return numbers[-1] if numbers else None


def test_a_discrete_sensor_is_on_the_status_panel_and_its_change_shows(pipeline: Pipeline) -> None:
    """HPE's `Fan 1 Presence` (a discrete row of the listing) is on the BMC status panel, which maps the
    states `discover` saw to "as discovered"; the fan's states changing at the BMC reach that target."""
    board = pipeline.boards["hpe-dl360-gen9"]
    thermals = json.loads(board.rendering.files["monitoring/grafana/dashboards/thermals-fans.json"])
    panel = next(p for p in thermals["panels"] if p["title"] == "BMC status (discrete sensors)")
    assert panel["type"] == "stat"
    target = next(t["target"] for t in panel["targets"] if t["target"].endswith(",'Fan 1 Presence')"))
    override = next(o for o in panel["fieldConfig"]["overrides"] if o["matcher"]["options"] == "Fan 1 Presence")
    options = override["properties"][0]["value"][0]["options"]
    [normal] = [value for value, shown in options.items() if shown["text"].startswith("as discovered")]
    assert int(normal) == 0x0200  # the listing's 0x0280, less the reserved bit ipmi_sim leaves clear
    # generic type 08h (IPMI 2.0 Table 42-2): offset 1 "device present"; offset 1 cleared: none asserted
    assert options[normal]["text"] == "as discovered: device present" and options["0"]["text"] == "no state asserted"
    e2e.wait_until(lambda: _last_number(pipeline, target) == int(normal), 12 * INTERVAL, "no discovered state")
    sensor = board.bmc.sensor("Fan 1 Presence")
    board.bmc.set(sensor, 0x00)  # the fan pulled: "Device Present" deasserted
    try:
        e2e.wait_until(lambda: _last_number(pipeline, target) == 0, 12 * INTERVAL, "state change not seen")
    finally:
        board.bmc.set(sensor, sensor.row.states or 0)


def _wait_alerting(pipe: Pipeline, cases: list[tuple[str, str]]) -> None:
    """Wait until each (board, rule uid) is Alerting, evaluated tick by tick as Grafana would."""
    for board, uid in cases:
        rule = next(r for r in pipe.boards[board].rules() if r["uid"] == uid)
        instance = grafana_eval.Instance(rule)

        def alerting(rule: dict[str, Any] = rule, instance: grafana_eval.Instance = instance) -> bool:
            return instance.step(grafana_eval.evaluate(rule, pipe.render), time.monotonic()) == "Alerting"

        e2e.wait_until(alerting, 12 * INTERVAL, f"{board} {uid} never fired", step=1)


def _wait_normal(pipe: Pipeline, board: str, uid: str) -> None:
    e2e.wait_until(lambda: _state(pipe, board, uid).state == "Normal", 12 * INTERVAL, f"{board} {uid} not Normal")


def test_a_discrete_sensor_s_change_fires_its_state_rule(pipeline: Pipeline) -> None:
    """A power supply's input lost (ASUS' `PSU1 AC Lost`, offset 3 of a power supply sensor) and a fan
    pulled (HPE's `Fan 1 Presence`): each sensor's state rule fires, and goes back to Normal with it."""
    cases = [("esc8000a-e12", "PSU1 AC Lost", 0x08, "state-psu1-ac-lost"),
             ("hpe-dl360-gen9", "Fan 1 Presence", 0x00, "state-fan-1-presence")]  # fmt: skip
    for board, _name, _value, uid in cases:  # (the status panel's test has just put Fan 1 back)
        _wait_normal(pipeline, board, uid)
    changed = []
    try:
        for board, name, value, _uid in cases:
            sensor = pipeline.boards[board].bmc.sensor(name)
            pipeline.boards[board].bmc.set(sensor, value)
            changed.append((pipeline.boards[board].bmc, sensor))
        _wait_alerting(pipeline, [(board, uid) for board, _n, _v, uid in cases])
    finally:
        for bmc, sensor in changed:
            bmc.set(sensor, sensor.row.states or 0)
    for board, _name, _value, uid in cases:
        _wait_normal(pipeline, board, uid)


def test_check_reports_the_sensor_that_left_the_bmc(pipeline: Pipeline) -> None:
    from homelab.monitoring import inventory
    from homelab.monitoring.discover import check, inventory_path

    board = pipeline.boards[GONE[0]]
    loaded = load(board.config)
    drift = check(bmc_reader(loaded), inventory.load(inventory_path(loaded)))
    assert drift.missing == (GONE[1],) and drift.new == ()


def test_carbon_stores_without_tagging(pipeline: Pipeline) -> None:
    """ENABLE_TAGS = False: carbon no longer asks graphite-web's tag API about each new series (with the
    default True it logs `[tagdb] Error tagging ...` for every one: seen with this carbon-cache)."""
    assert pipeline.carbon.process is not None
    log = pipeline.carbon.process.log()
    assert pipeline.carbon.wsp_files() and "Error tagging" not in log and "[tagdb]" not in log


def test_the_thermal_panels_of_a_corpus_board_draw(pipeline: Pipeline, tmp_path: Path) -> None:
    """PNGs of the HPE board's thermal panels (graphite-web draws them from the dashboard targets);
    HOMELAB_E2E_DOCS_IMG=docs/img keeps them for docs/monitoring.md."""
    from homelab.monitoring.snapshot import PNG_MAGIC, panel_graphs, render_png

    board = pipeline.boards["hpe-dl360-gen9"]
    boards = {
        name.removeprefix("monitoring/grafana/dashboards/").removesuffix(".json"): json.loads(content)
        for name, content in board.rendering.files.items()
        if name.startswith("monitoring/grafana/dashboards/")
    }
    titles = ["BMC temperatures", "Fan duty", "Power"]
    graphs = [g for g in panel_graphs(boards, all_panels=True) if g.title in titles]
    assert [g.title for g in graphs] == titles
    keep = os.environ.get("HOMELAB_E2E_DOCS_IMG")
    for graph in graphs:
        since = f"-{int(time.time() - pipeline.started) + 10}s"  # the whole run
        png = render_png(pipeline.web.url, graph, since, "now", 900, 320)
        assert png.startswith(PNG_MAGIC) and len(png) > 5000, graph.title
        if keep:
            e2e.docs_img(keep).mkdir(parents=True, exist_ok=True)
            (e2e.docs_img(keep) / f"corpus-hpe-dl360-gen9--{graph.file_name.split('--')[1]}").write_bytes(png)


def test_a_new_critical_sel_entry_fires_and_a_correctable_one_does_not(pipeline: Pipeline) -> None:
    """ASUS: a power supply failure (sensor type 08h, offset 1) logged in the SEL fires the SEL rule;
    HPE: a correctable ECC (0Ch, offset 0) is counted as a new entry, and fires nothing."""
    asus, hpe = pipeline.boards["esc8000a-e12"], pipeline.boards["hpe-dl360-gen9"]
    hpe_new = next(s.path for s in hpe.catalog.series if s.plugin == "bmc_sel" and s.type_instance == "new")
    assert _state(pipeline, asus.name, "sel-critical").state == "Normal"
    asus.bmc.add_sel(0x08, 0x41, 1)
    hpe.bmc.add_sel(0x0C, 0x42, 0)
    _wait_alerting(pipeline, [(asus.name, "sel-critical")])

    def counted() -> bool:
        answer = pipeline.render(hpe_new, 12 * INTERVAL)
        return bool(answer) and any(v for v, _ts in answer[0]["datapoints"])

    e2e.wait_until(counted, 12 * INTERVAL, "the new SEL entry was not counted")
    assert _state(pipeline, hpe.name, "sel-critical").state == "Normal"
