"""Issue 20's runaway proof in monitoring, on the real engine: the real collectd 5.12 runs the rendered
collectd.conf's containers plugin (homelab/collectd_plugins/containers.py) against this host's real cgroups
and the engine's real container records; carbon-cache and graphite-web store and answer; the Containers
dashboard's targets return data and the alert rules, evaluated with Grafana's semantics
(tests/monitoring/grafana_eval.py), breach after the OOM kill (and after three restarts), not before.

The stand-ins run on the engine directly (busybox, no homelab stack): one labelled as the example's
dev/rstudio service (Compose's labels), 64 MiB limit, restart policy unless-stopped, which grows without
end when asked (the OOM killer takes its main process, the engine restarts it); one with no memory limit
and a name with a dot, which Graphite paths cannot hold (collectd's write_graphite replaces it with its
EscapeCharacter, "_", collectd.conf(5))."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from standins import Rootfs, docker

from homelab.config.loader import load
from homelab.monitoring.catalog_builder import catalog_for
from homelab.monitoring.series import Catalog
from homelab.plan import build_plan
from homelab.render import render_all
from homelab.render.collectd import collectd_conf
from tests.conftest import EXAMPLE, EXAMPLE_SECRETS, find_program, missing, write_secret
from tests.monitoring import e2e_support as e2e
from tests.monitoring import grafana_eval

pytestmark = [pytest.mark.docker, pytest.mark.real]

INTERVAL = 5
HOG_LIMIT = 64 << 20
SECRETS = {f"secrets/{name}": "x" for name in ("ddns-password", "b2-account", "b2-key")}
# waits for /tmp/hog, removes it, then grows without end (each run: the container's writable layer
# outlives a restart, so the next run waits again)
HOG = (
    "while [ ! -e /tmp/hog ]; do sleep 0.3; done; rm -f /tmp/hog; "
    'exec awk "BEGIN { s = \\"0123456789abcdef\\"; while (1) s = s s }"'
)


def _only_containers(catalog: Catalog) -> Catalog:
    keep = ("containers", "uptime")
    return dataclasses.replace(
        catalog,
        plugins=tuple(p for p in catalog.plugins if p.name in keep),
        series=tuple(s for s in catalog.series if s.plugin in ("container", "uptime")),
    )


def _engine_containers_dir() -> str:
    root = docker("info", "--format", "{{.DockerRootDir}}").stdout.strip()
    return f"{root}/containers"


@dataclasses.dataclass
class Lab:
    web: e2e.GraphiteWeb
    collectd: e2e.Collectd
    rendering: Any
    hog: str
    odd: str

    def render(self, target: str, seconds: int) -> list[dict[str, Any]]:
        return self.web.render(target, f"-{seconds}s")

    def rule(self, uid: str) -> dict[str, Any]:
        rules = yaml.safe_load(self.rendering.files["monitoring/grafana/provisioning/alerting/rules.yaml"])
        return next(r for r in rules["groups"][0]["rules"] if r["uid"] == uid)

    def panel_targets(self, title: str) -> list[str]:
        board = json.loads(self.rendering.files["monitoring/grafana/dashboards/containers.json"])
        panel = next(p for p in board["panels"] if p["title"] == title)
        return [t["target"] for t in panel["targets"]]

    def restarts(self) -> int:
        return int(json.loads(docker("inspect", self.hog).stdout)[0]["RestartCount"])

    def oom_kill(self) -> None:
        """Ask the runaway to grow, and wait until the engine has restarted it."""
        before = self.restarts()
        docker("exec", self.hog, "touch", "/tmp/hog")
        e2e.wait_until(lambda: self.restarts() > before, 60, "the runaway OOM-killed and restarted", step=0.3)
        assert json.loads(docker("inspect", self.hog).stdout)[0]["State"]["OOMKilled"] is True


@pytest.fixture(scope="module")
def lab(engine, tmp_path_factory: pytest.TempPathFactory, example_dir_module: Path):  # type: ignore[no-untyped-def]
    if os.geteuid() != 0:
        missing("root (the engine's container records and the cgroup files are root's)")
    programs = {n: find_program(n) or missing(f"program {n!r}") or "" for n in ("collectd", "carbon-cache")}
    base = tmp_path_factory.mktemp("containers")
    shared = Path(tempfile.mkdtemp(prefix="homelab-containers-"))  # collectd's python module path
    config = example_dir_module / "homelab.yaml"
    raw = yaml.safe_load(config.read_text())
    raw["monitoring"]["interval"] = INTERVAL
    config.write_text(yaml.safe_dump(raw, sort_keys=False))
    plan = build_plan(load(config))
    rendering = render_all(plan, SECRETS)
    catalog = _only_containers(catalog_for(plan))
    suffix = uuid.uuid4().hex[:8]
    hog, odd = f"homelab-test-hog-{suffix}", f"homelab-test.odd-{suffix}"
    started: list[Any] = []
    containers: list[str] = []
    try:
        root = Rootfs(base / "busybox.tar")
        root.busybox()
        image = root.import_as(f"homelab-test/containers-standin:{suffix}")
        docker("run", "-d", "--name", hog, "--memory", str(HOG_LIMIT), "--memory-swap", str(HOG_LIMIT),
               "--restart", "unless-stopped", "--label", "com.docker.compose.project=homelab-dev",
               "--label", "com.docker.compose.service=rstudio", "--entrypoint", "/bin/sh", image,
               "-c", HOG)  # fmt: skip
        containers.append(hog)
        docker("run", "-d", "--name", odd, "--entrypoint", "/bin/sh", image, "-c", "sleep 3600")
        containers.append(odd)
        carbon = e2e.Carbon.from_rendering(programs["carbon-cache"], base / "graphite", rendering.files)
        web = e2e.GraphiteWeb(base / "web", carbon.storage, carbon.query_port)
        started += [web, carbon]
        carbon.launch()
        carbon.wait_listening()
        (shared / "containers.py").write_bytes(rendering.files["monitoring/collectd/containers.py"])
        conf = base / "collectd.conf"
        conf.write_text(
            collectd_conf(catalog, carbon_port=carbon.line_port, socket=str(shared / "collectd.sock"),
                          python_module_dir=str(shared), cgroup_root="/sys/fs/cgroup",
                          containers_dir=_engine_containers_dir())
        )  # fmt: skip
        collectd = e2e.Collectd(programs["collectd"], conf, base / "collectd.log")
        started.append(collectd)
        web.wait_ready()
        yield Lab(web, collectd, rendering, hog, odd)
        log = collectd.process.log()
        assert "Traceback" not in log and "Unhandled python exception" not in log, log[-3000:]
    finally:
        for component in reversed(started):
            component.stop()
        for name in containers:
            docker("rm", "-f", name, check=False)
        docker("rmi", "-f", f"homelab-test/containers-standin:{suffix}", check=False)
        shutil.rmtree(shared, ignore_errors=True)


@pytest.fixture(scope="module")
def example_dir_module(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("example")
    shutil.copy(EXAMPLE, target / "homelab.yaml")
    for name in EXAMPLE_SECRETS:
        write_secret(target / "secrets" / name, f"example-{name}-value")
    return target


def _points(lab: Lab, target: str, seconds: int = 12 * INTERVAL) -> list[tuple[int, float]]:
    lab.collectd.process.check_alive()
    return e2e.points(lab.web.render(target, f"-{seconds}s"))


def _state(lab: Lab, uid: str) -> grafana_eval.Result:
    return grafana_eval.evaluate(lab.rule(uid), lab.render)


def test_memory_cpu_and_the_alerts_of_a_real_container(lab: Lab) -> None:
    host = "nas"
    memory = next(t for t in lab.panel_targets("Memory in use and limit") if ".container-dev-rstudio.memory-used" in t)
    limit = next(t for t in lab.panel_targets("Memory in use and limit") if ".container-dev-rstudio.memory-limit" in t)
    cpu = next(t for t in lab.panel_targets("CPU (percent of one core)") if ".container-dev-rstudio." in t)
    for target in (memory, limit, cpu):
        e2e.wait_until(lambda t=target: _points(lab, t), 12 * INTERVAL, f"no data for the panel's {target}", step=1)
    assert _points(lab, limit)[-1][1] == HOG_LIMIT
    used = _points(lab, memory)[-1][1]
    assert 0 < used < HOG_LIMIT / 2, used  # a shell asleep
    assert 0 <= _points(lab, cpu)[-1][1] < 50

    # the one with no limit and a dot in its name: memory in use, no limit series, '.' escaped to '_'
    odd = f"collectd.{host}.container-{lab.odd.replace('.', '_')}"
    e2e.wait_until(lambda: _points(lab, f"{odd}.memory-used"), 12 * INTERVAL, f"no {odd}.memory-used", step=1)
    assert _points(lab, f"{odd}.memory-limit") == []
    assert _points(lab, f"{odd}.count-restarts")[-1][1] == 0

    # before any OOM kill the rules evaluate to a number, and it is not a breach
    oom, restarts = lab.rule("oom-dev-rstudio"), lab.rule("restarts-dev-rstudio")
    e2e.wait_until(lambda: _state(lab, "oom-dev-rstudio").values, 12 * INTERVAL, "the OOM rule has no value", step=1)
    assert _state(lab, "oom-dev-rstudio") == grafana_eval.Result("Normal", (0.0,), "normal")
    assert _state(lab, "restarts-dev-rstudio").state == "Normal"

    lab.oom_kill()
    instance = grafana_eval.Instance(oom)
    start = time.monotonic()

    def fired() -> bool:
        return instance.step(grafana_eval.evaluate(oom, lab.render), time.monotonic()) == "Alerting"

    e2e.wait_until(fired, 6 * INTERVAL, "the OOM rule did not fire after the OOM kill", step=1)
    print(f"OOM rule alerting {time.monotonic() - start:.1f}s after the restart")
    oom_kills = next(t for t in lab.panel_targets("OOM kills (since collectd started)") if "dev-rstudio" in t)
    assert _points(lab, oom_kills)[-1][1] == 1  # counted once: by the engine's record, its cgroup gone
    assert _state(lab, "restarts-dev-rstudio").state == "Normal"  # one restart is no crash loop

    lab.oom_kill()
    e2e.wait_until(lambda: _state(lab, "restarts-dev-rstudio").values == (2.0,), 6 * INTERVAL, "2 restarts", step=1)
    assert _state(lab, "restarts-dev-rstudio").state == "Normal"
    lab.oom_kill()
    instance = grafana_eval.Instance(restarts)
    e2e.wait_until(
        lambda: instance.step(grafana_eval.evaluate(restarts, lab.render), time.monotonic()) == "Alerting",
        6 * INTERVAL,
        "the restarts rule did not fire after the third restart",
        step=1,
    )
    assert _points(lab, oom_kills)[-1][1] == 3
    log = lab.collectd.process.log()
    assert "Traceback" not in log, log[-3000:]
