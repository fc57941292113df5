"""The monitoring stack end to end, with real daemons on loopback (issue 4's proof).

    ipmi_sim (the ecc-mini-itx profile's BMC sensors, values from files)
      -> collectd running the rendered collectd.conf (ipmi over RMCP+, the rendered secret include)
      -> write_graphite -> carbon-cache with the rendered carbon.conf and schemas
      -> graphite-web (PyPI) /render

The example homelab.yaml is used with two changes, made in the test's homelab.yaml (not in the
output): `monitoring.interval` is short, and `monitoring.ipmi` is `lan` towards the simulator.
Plugins whose hardware this machine lacks are swapped, through `collectd_conf(replace=...)`, for
real collectd exec programs named in STAND_INS, each sending exactly its plugin's catalog series.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
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
from homelab.monitoring.series import Catalog
from homelab.plan import build_plan
from homelab.plan_model import Plan
from homelab.render import Rendering, render_all
from homelab.render.alerts import alert_specs
from homelab.render.collectd import collectd_conf
from tests.conftest import EXAMPLE, EXAMPLE_SECRETS, find_program, missing, write_secret
from tests.monitoring import e2e_support as e2e
from tests.monitoring import grafana_eval

pytestmark = pytest.mark.real

INTERVAL = 5  # seconds; the example's 10 s would make the test twice as long
# Plugins that cannot read anything on this machine, and why: each is replaced by an exec program.
STAND_INS = ["sensors", "thermal", "smart", "disk", "df", "zfs_arc", "interface", "exec", "containers"]
# Plugins that read the real machine (or the simulator): cpu, memory, load, tcpconns, uptime, ipmi.
CARBON_OUTAGE = 15  # seconds carbon-cache stays down
DOCS_IMG_ENV = "HOMELAB_E2E_DOCS_IMG"  # set to a directory to keep the snapshot PNGs (docs/img)


@dataclass
class Pipeline:
    config_path: Path
    plan: Plan
    catalog: Catalog
    rendering: Rendering
    bmc: e2e.Bmc
    carbon: e2e.Carbon
    web: e2e.GraphiteWeb
    collectd: e2e.Collectd
    conf_text: str

    def targets(self) -> dict[str, str]:
        """Every Graphite query of the rendered dashboards and alert rules: query -> where it is."""
        found: dict[str, str] = {}
        for name, content in sorted(self.rendering.files.items()):
            if name.startswith("monitoring/grafana/dashboards/"):
                board = json.loads(content)
                for panel in board["panels"]:
                    for target in panel.get("targets", []):
                        found.setdefault(target["target"], f"{board['title']} / {panel['title']}")
        rules = yaml.safe_load(self.rendering.files["monitoring/grafana/provisioning/alerting/rules.yaml"])
        for group in rules["groups"]:
            for rule in group["rules"]:
                for query in rule["data"]:
                    if query["datasourceUid"] != "__expr__":
                        found.setdefault(query["model"]["target"], f"alert {rule['title']}")
        return found

    def alive(self) -> None:
        for process in (self.bmc.process, self.collectd.process, self.web.process):
            process.check_alive()


def _program(name: str) -> str:
    path = find_program(name)
    if path is None:
        missing(f"program {name!r}")
    return str(path)


@pytest.fixture(scope="session")
def pipeline(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pipeline]:
    if os.geteuid() != 0:
        missing("root (collectd's ipmi plugin only talks to UDP port 623; exec programs run as nobody)")
    programs = {name: _program(name) for name in ("ipmi_sim", "sdrcomp", "collectd", "carbon-cache")}
    ipmitool = find_program("ipmitool")
    try:
        import graphite  # type: ignore[import-untyped]  # noqa: F401
        import whisper  # type: ignore[import-untyped]  # noqa: F401
    except ImportError as exc:
        missing(f"python package {exc.name!r} (scripts/pip/monitoring.txt)")

    base = tmp_path_factory.mktemp("monitoring-e2e")
    # world-readable scratch dir for what collectd runs as `nobody` (pytest's tmp dirs are 0700)
    shared = Path(tempfile.mkdtemp(prefix="homelab-e2e-"))
    shared.chmod(0o755)
    started: list[Any] = []
    t0 = time.monotonic()

    def phase(what: str) -> None:
        print(f"[e2e {time.monotonic() - t0:5.1f}s] {what}")

    try:
        address = e2e.bmc_address()
        # the test's homelab.yaml: the example, a short interval, the BMC over LAN
        project = base / "project"
        project.mkdir()
        raw = yaml.safe_load(EXAMPLE.read_text())
        raw["monitoring"]["interval"] = INTERVAL
        raw["monitoring"]["ipmi"] = {
            "mode": "lan",
            "address": address,
            "username": e2e.BMC_USER,
            "password_file": "secrets/bmc",
        }
        config_path = project / "homelab.yaml"
        config_path.write_text(yaml.safe_dump(raw, sort_keys=False))
        secrets = {}
        for name in EXAMPLE_SECRETS:
            write_secret(project / "secrets" / name, f"example-{name}-value")
            secrets[f"secrets/{name}"] = f"example-{name}-value"
        write_secret(project / "secrets" / "bmc", e2e.BMC_PASSWORD)
        secrets["secrets/bmc"] = e2e.BMC_PASSWORD
        plan = build_plan(load(config_path))
        catalog = catalog_for(plan)
        rendering = render_all(plan, secrets)
        phase("rendered")

        carbon = e2e.Carbon.from_rendering(programs["carbon-cache"], base / "graphite", rendering.files)
        web = e2e.GraphiteWeb(base / "web", carbon.storage, carbon.query_port)  # slowest to start: first
        started.append(web)
        carbon.launch()
        started.append(carbon)
        bmc = e2e.Bmc(plan.profile, base / "bmc", address, programs["ipmi_sim"], programs["sdrcomp"])
        started.append(bmc)
        bmc.wait_ready(ipmitool)
        carbon.wait_listening()
        phase("ipmi_sim and carbon-cache up")

        include = shared / "ipmi.conf"  # the rendered secret include (mode 0600, read by root collectd)
        include.write_bytes(rendering.secret_files[IPMI_SECRET])
        include.chmod(0o600)
        replace = e2e.stand_ins(catalog, STAND_INS, shared / "stand-ins")
        conf_text = collectd_conf(
            catalog,
            carbon_port=carbon.line_port,
            socket=str(shared / "collectd.sock"),
            ipmi_include=str(include),
            replace=replace,
        )
        conf = base / "collectd.conf"
        conf.write_text(conf_text)
        collectd = e2e.Collectd(programs["collectd"], conf, base / "collectd.log")
        started.append(collectd)
        web.wait_ready()
        phase("graphite-web up")
        pipe = Pipeline(config_path, plan, catalog, rendering, bmc, carbon, web, collectd, conf_text)
        # collection has started once the BMC's CPU temperature reached graphite-web
        cpu = catalog.one(plugin="ipmi", type="temperature", type_instance="CPU Temp processor (3.1)")

        def first_reading() -> list[tuple[int, float]]:
            pipe.alive()
            return e2e.points(web.render(cpu.path, "-2min"))

        e2e.wait_until(
            first_reading,
            60,
            f"no {cpu.path} in graphite-web; collectd log:\n{collectd.process.log()[-3000:]}",
            step=0.5,
        )
        phase("first BMC reading in graphite-web")
        yield pipe
    finally:
        for component in reversed(started):
            component.stop()
        shutil.rmtree(shared, ignore_errors=True)


def test_the_running_config_is_the_rendered_one(pipeline: Pipeline) -> None:
    """What collectd runs is the rendered collectd.conf with only the named plugins swapped."""
    rendered = pipeline.rendering.files["monitoring/collectd/collectd.conf"].decode()
    assert collectd_conf(pipeline.catalog) == rendered
    assert f"Interval {INTERVAL}\n" in rendered
    hardware = {p.name for p in pipeline.catalog.plugins if p.needs_hardware}
    assert set(STAND_INS) - {"exec"} <= hardware
    for plugin in pipeline.catalog.plugins:
        loaded = f"LoadPlugin {plugin.name}\n" in pipeline.conf_text
        assert loaded == (plugin.name not in STAND_INS or plugin.name == "exec"), plugin.name
    for name in STAND_INS:
        assert f"# stand-in: {name}: " in pipeline.conf_text
    # the rendered storage schema's finest precision is the collectd interval
    assert pipeline.catalog.retentions[0].precision == INTERVAL
    log = pipeline.collectd.process.log()
    assert "Connection to the BMC restored" in log or "Connection 0 to the BMC is up" in log


def test_every_dashboard_and_alert_query_has_fresh_data(pipeline: Pipeline) -> None:
    """Each query's newest point was collected within the last two intervals (whisper floors a
    point's time to its interval, so its bucket starts less than three intervals ago)."""
    targets = pipeline.targets()
    assert len(targets) > 20
    stale: dict[str, str] = {}

    def all_fresh() -> bool:
        pipeline.alive()
        stale.clear()
        now = time.time()  # ages are taken at the request (a loaded machine answers slowly)
        answers = pipeline.web.render_many(list(targets), f"-{10 * INTERVAL}s")
        for target, where in targets.items():
            found = answers[target]
            age = now - found[-1][0] if found else None
            if age is None or age >= 3 * INTERVAL:
                stale[target] = f"{where}: " + ("no point" if age is None else f"newest point {age:.0f}s old")
        return not stale

    start = time.time()
    try:
        e2e.wait_until(
            lambda: (all_fresh(), print(f"  {time.time() - start:4.1f}s: {len(stale)} stale"))[0],
            6 * INTERVAL,
            "stale",
            step=1,
        )
    except TimeoutError:
        pytest.fail("queries without fresh data:\n" + "\n".join(f"  {t}\n    {w}" for t, w in stale.items()))
    print(f"{len(targets)} queries fresh, {time.time() - pipeline.collectd.started:.0f}s after collectd started")
    # and nothing of the catalog was dropped: every series gets its whisper file. Carbon answers
    # queries from its cache before its writer has created every file (it creates them as it drains
    # the cache, slower on a loaded machine): wait for them, bounded
    absent: list[str] = []

    def all_created() -> bool:
        absent[:] = [s.path for s in pipeline.catalog.series if not pipeline.carbon.file_for(s.path).is_file()]
        return not absent

    with contextlib.suppress(TimeoutError):
        e2e.wait_until(all_created, 6 * INTERVAL, "whisper files", step=0.5)
    assert absent == []


def _rules(pipeline: Pipeline) -> dict[str, dict[str, Any]]:
    rules = yaml.safe_load(pipeline.rendering.files["monitoring/grafana/provisioning/alerting/rules.yaml"])
    return {r["uid"]: r for g in rules["groups"] for r in g["rules"]}


def _evaluate(pipeline: Pipeline, rule: dict[str, Any]) -> grafana_eval.Result:
    return grafana_eval.evaluate(rule, lambda target, seconds: pipeline.web.render(target, f"-{seconds}s"))


def test_every_alert_rule_evaluates_to_a_number(pipeline: Pipeline) -> None:
    """Every rule of the rendered rules.yaml, under Grafana's reduce/threshold/no-data semantics
    (grafana_eval), on graphite-web's answers: a number for every series (no NoData), and the BMC's
    and CPU rules Normal on healthy readings. (The stand-ins' df values make the pool look >80 % full,
    so the pool rule's state is not asserted.)"""
    rules = _rules(pipeline)
    results: dict[str, grafana_eval.Result] = {}

    def evaluated() -> bool:
        results.clear()
        results.update({uid: _evaluate(pipeline, rule) for uid, rule in rules.items()})
        return all(r.values and all(not math.isnan(v) for v in r.values) for r in results.values())

    e2e.wait_until(evaluated, 6 * INTERVAL, "rules without a number", step=1)
    hardware = [uid for uid, rule in rules.items() if ".ipmi." in rule["data"][0]["model"]["target"]]
    assert len(hardware) >= 9 and "cpu-temperature" in rules
    assert {uid: results[uid].state for uid in [*hardware, "cpu-temperature", "no-data"]} == dict.fromkeys(
        [*hardware, "cpu-temperature", "no-data"], "Normal"
    )


def test_cpu_over_temperature_shows_in_the_series(pipeline: Pipeline) -> None:
    spec = next(s for s in alert_specs(pipeline.plan, pipeline.catalog) if s.uid == "cpu-temperature")
    cpu = pipeline.catalog.one(plugin="ipmi", type="temperature", type_instance="CPU Temp processor (3.1)")
    before = e2e.points(pipeline.web.render(cpu.path, "-1min"))
    assert before and before[-1][1] < spec.threshold
    raised = pipeline.bmc.set("CPU Temp", spec.threshold + 8)
    assert raised > spec.threshold
    start = time.time()
    try:

        def over(target: str) -> bool:
            found = e2e.points(pipeline.web.render(target, "-1min"))
            return any(ts >= start - INTERVAL and value > spec.threshold for ts, value in found)

        e2e.wait_until(
            lambda: over(cpu.path), 2 * INTERVAL + 3, f"{cpu.path} never went over {spec.threshold}", step=0.5
        )
        elapsed = time.time() - start
        # the alert rule's query and the dashboard panel see it too
        assert over(spec.target)
        newest = e2e.points(pipeline.web.render(cpu.path, "-1min"))[-1][1]
        assert newest == pytest.approx(raised, abs=1)
        # and the rule fires under Grafana's semantics (its window ends in a null point: dropNN matters)
        rule = _rules(pipeline)["cpu-temperature"]
        e2e.wait_until(lambda: _evaluate(pipeline, rule).state == "Alerting", 6 * INTERVAL, "cpu rule Normal")
        print(f"CPU temperature over {spec.threshold:g} °C visible after {elapsed:.1f}s")
    finally:
        pipeline.bmc.set("CPU Temp", pipeline.bmc.sensor("CPU Temp").nominal())


def test_snapshot_renders_the_main_panels(pipeline: Pipeline, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from homelab.cli.monitor import monitor_app
    from homelab.monitoring.snapshot import MAIN_PANELS, PNG_MAGIC

    out = tmp_path / "img"
    if os.environ.get(DOCS_IMG_ENV):
        time.sleep(2 * INTERVAL)  # for the docs: let the CPU temperature spike come back down first
    since = f"-{int(time.time() - pipeline.collectd.started) + 10}s"  # the whole run
    done = CliRunner().invoke(
        monitor_app,
        [
            "snapshot",
            "--out",
            str(out),
            "--graphite-url",
            pipeline.web.url,
            "--from",
            since,
            "--config",
            str(pipeline.config_path),
        ],
    )
    assert done.exit_code == 0, done.output
    files = [Path(line) for line in done.output.split()]
    assert len(files) == len(MAIN_PANELS)
    for path in files:
        data = path.read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 5000, path
    if os.environ.get(DOCS_IMG_ENV):
        target = e2e.docs_img(os.environ[DOCS_IMG_ENV])
        target.mkdir(parents=True, exist_ok=True)
        for path in files:
            shutil.copy(path, target / path.name)


def test_collection_resumes_after_a_carbon_outage(pipeline: Pipeline) -> None:
    carbon = pipeline.carbon
    probes = [
        pipeline.catalog.one(plugin="uptime", type="uptime"),
        pipeline.catalog.one(plugin="ipmi", type="temperature", type_instance="CPU Temp processor (3.1)"),
        pipeline.catalog.one(plugin="cpu", type="percent", type_instance="user"),
        pipeline.catalog.select(plugin="smart", type="smart_temperature")[0],
    ]
    t0 = time.time()
    carbon.stop()
    stopped = time.time()
    time.sleep(CARBON_OUTAGE)
    pipeline.alive()  # collectd survives a missing carbon
    carbon.start()
    restarted = time.time()
    print(f"carbon stopped in {stopped - t0:.1f}s, down {restarted - stopped:.1f}s")

    def resumed() -> bool:
        pipeline.alive()
        return all(
            any(ts >= restarted - INTERVAL for ts, _ in e2e.points(pipeline.web.render(p.path, "-1min")))
            for p in probes
        )

    e2e.wait_until(resumed, 2 * INTERVAL + 2, "collection did not resume within two intervals", step=0.5)
    print(f"collection resumed {time.time() - restarted:.1f}s after carbon restarted")
    import whisper  # type: ignore[import-untyped]

    expected = pipeline.catalog.whisper_bytes_per_series()
    bad = []
    for path in carbon.wsp_files():
        size = path.stat().st_size
        try:
            info = whisper.info(str(path))
        except Exception as exc:
            bad.append(f"{path}: {exc}")
            continue
        if size == 0 or not info["archives"]:
            bad.append(f"{path}: empty")
        elif path.relative_to(carbon.whisper_dir).parts[0] == "collectd" and size != expected:
            bad.append(f"{path}: {size} bytes, expected {expected}")
    assert bad == []
