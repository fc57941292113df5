"""The containers' collectd python plugin (homelab/collectd_plugins/containers.py) outside collectd, on cgroup
trees written here in the kernel's formats (Documentation/admin-guide/cgroup-v2.rst: memory.current,
memory.max "max", memory.events "low/high/max/oom/oom_kill/oom_group_kill", cpu.stat usage_usec;
cgroup-v1/memory.rst: memory.usage_in_bytes, memory.oom_control, cpuacct.usage in ns) and engine
records shaped as this machine's Docker 20.10 writes config.v2.json. The real collectd reads a real
container in tests/monitoring/test_containers_real.py; here the hostile cases: no limit, a container
gone between listing and reading, odd names, no cgroup hierarchy, a broken record, counting OOM kills
once."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from homelab.collectd_plugins import containers as plugin
from homelab.monitoring.series import Series
from homelab.render.alerts import RESTARTS, alert_specs
from homelab.render.collectd import collectd_conf

V1_NO_LIMIT = "9223372036854771712"  # what this machine's v1 kernel prints for an unlimited memcg


@dataclass
class Node:
    key: str
    values: tuple[Any, ...] = ()
    children: list[Node] = field(default_factory=list)


@dataclass
class FakeCollectd:
    """collectd's python module as the plugin uses it."""

    dispatched: dict[tuple[str, str, str], float] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def register_config(self, callback: Any) -> None: ...
    def register_read(self, callback: Any) -> None: ...

    def error(self, text: str) -> None:
        self.errors.append(text)

    def warning(self, text: str) -> None:
        self.warnings.append(text)

    def Values(self, plugin: str, plugin_instance: str, type: str, type_instance: str) -> Any:
        fake = self

        class Values:
            def dispatch(self, values: list[float]) -> None:
                fake.dispatched[(plugin_instance, type, type_instance)] = values[0]

        return Values()


class Host:
    """A host's /sys/fs/cgroup (v1 or v2) and the engine's containers folder."""

    def __init__(self, root: Path, version: int) -> None:
        self.cgroups, self.records, self.version = root / "cgroup", root / "containers", version
        self.records.mkdir(parents=True)
        if version == 2:
            self.cgroups.mkdir()
            (self.cgroups / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
        else:
            for controller in ("memory", "cpuacct", "unified"):
                (self.cgroups / controller).mkdir(parents=True)

    def container(self, cid: str, name: str, *, labels: dict[str, str] | None = None, restarts: int = 0,
                  oom_killed: bool = False, finished: str = "0001-01-01T00:00:00Z", started: str = "t0",
                  running: bool = True) -> None:  # fmt: skip
        (self.records / cid).mkdir(exist_ok=True)
        record = {
            "ID": cid, "Name": f"/{name}", "RestartCount": restarts,
            "State": {"Running": running, "OOMKilled": oom_killed, "StartedAt": started, "FinishedAt": finished},
            "Config": {"Labels": labels or {}},
        }  # fmt: skip
        (self.records / cid / "config.v2.json").write_text(json.dumps(record))

    def cgroup(self, cid: str, *, memory: int, limit: int | None, cpu_seconds: float, oom_kills: int = 0,
               inactive_file: int = 0, systemd: bool = False) -> None:  # fmt: skip
        place = f"system.slice/docker-{cid}.scope" if systemd else f"docker/{cid}"
        if self.version == 2:
            d = self.cgroups / place
            d.mkdir(parents=True, exist_ok=True)
            (d / "memory.current").write_text(f"{memory}\n")
            (d / "memory.max").write_text("max\n" if limit is None else f"{limit}\n")
            (d / "memory.stat").write_text(f"anon {memory}\nfile 0\ninactive_file {inactive_file}\n")
            (d / "memory.events").write_text(f"low 0\nhigh 0\nmax 3\noom 1\noom_kill {oom_kills}\noom_group_kill 0\n")
            (d / "cpu.stat").write_text(f"usage_usec {int(cpu_seconds * 1e6)}\nuser_usec 0\nsystem_usec 0\n")
        else:
            m, c = self.cgroups / "memory" / place, self.cgroups / "cpuacct" / place
            m.mkdir(parents=True, exist_ok=True)
            c.mkdir(parents=True, exist_ok=True)
            (m / "memory.usage_in_bytes").write_text(f"{memory}\n")
            (m / "memory.limit_in_bytes").write_text(f"{V1_NO_LIMIT if limit is None else limit}\n")
            (m / "memory.stat").write_text(f"cache 0\ninactive_file 1\ntotal_inactive_file {inactive_file}\n")
            (m / "memory.oom_control").write_text(f"oom_kill_disable 0\nunder_oom 0\noom_kill {oom_kills}\n")
            (c / "cpuacct.usage").write_text(f"{int(cpu_seconds * 1e9)}\n")

    def remove_cgroup(self, cid: str) -> None:
        import shutil

        for hierarchy in ("", "memory", "cpuacct"):
            shutil.rmtree(self.cgroups / hierarchy / "docker" / cid, ignore_errors=True)

    def reader(self, services: tuple[tuple[str, str, str], ...] = ()) -> tuple[plugin.Reader, FakeCollectd]:
        collectd = FakeCollectd()
        reader = plugin.Reader(collectd)
        children = [Node("CgroupRoot", (str(self.cgroups),)), Node("ContainersDir", (str(self.records),))]
        children += [Node("Service", s) for s in services]
        reader.configure(Node("Module", ("containers",), children))
        return reader, collectd


@pytest.mark.parametrize("version", [1, 2])
def test_memory_limit_cpu_and_counts_per_service(tmp_path: Path, version: int,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    host = Host(tmp_path, version)
    labels = {"com.docker.compose.project": "homelab-dev", "com.docker.compose.service": "rstudio"}
    host.container("a1", "homelab-dev-rstudio-1", labels=labels, restarts=2)
    host.cgroup("a1", memory=50 << 20, limit=64 << 20, cpu_seconds=10, inactive_file=2 << 20, systemd=version == 2)
    # a container with no memory limit ("max" / v1's largest number), named with characters Graphite splits on
    host.container("b2", "my.app_1")
    host.cgroup("b2", memory=1000, limit=None, cpu_seconds=1)
    reader, collectd = host.reader((("dev-rstudio", "homelab-dev", "rstudio"),))
    clock = iter([100.0, 100.0, 110.0, 110.0])  # one call per running container and read
    monkeypatch.setattr(plugin.time, "monotonic", lambda: next(clock))
    reader.read()
    got = collectd.dispatched
    assert got[("dev-rstudio", "memory", "used")] == 48 << 20  # less the inactive file cache, as docker stats
    assert got[("dev-rstudio", "memory", "limit")] == 64 << 20
    assert got[("dev-rstudio", "count", "restarts")] == 2 and got[("dev-rstudio", "count", "oom_kills")] == 0
    assert ("dev-rstudio", "percent", "cpu") not in got  # a rate needs two reads
    assert got[("my.app_1", "memory", "used")] == 1000 and ("my.app_1", "memory", "limit") not in got
    # the dot is escaped by write_graphite, as for every other series of the catalog
    assert Series("nas", "container", "my.app_1", "memory", "used", None, "bytes", "x").path == (
        "collectd.nas.container-my_app_1.memory-used"
    )
    host.cgroup("a1", memory=50 << 20, limit=64 << 20, cpu_seconds=15, systemd=version == 2)  # +5 s in 10 s
    reader.read()
    assert collectd.dispatched[("dev-rstudio", "percent", "cpu")] == pytest.approx(50.0)
    assert not collectd.errors and not collectd.warnings


def test_swarm_labels_name_the_service_and_replicas_add_up(tmp_path: Path) -> None:
    host = Host(tmp_path, 2)
    swarm = {"com.docker.stack.namespace": "homelab-dev", "com.docker.swarm.service.name": "homelab-dev_gitea"}
    for cid in ("s1", "s2"):
        host.container(cid, f"homelab-dev_gitea.1.{cid}", labels=swarm)
        host.cgroup(cid, memory=100, limit=1000, cpu_seconds=1)
    reader, collectd = host.reader((("dev-gitea", "homelab-dev", "gitea"),))
    reader.read()
    assert collectd.dispatched[("dev-gitea", "memory", "used")] == 200
    assert collectd.dispatched[("dev-gitea", "memory", "limit")] == 2000


def test_a_container_gone_between_listing_and_reading_is_skipped(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    host = Host(tmp_path, 2)
    for cid in ("gone", "half", "kept"):
        host.container(cid, cid)
        host.cgroup(cid, memory=10, limit=100, cpu_seconds=1)
    real_read = plugin._read

    def racing(path: Path) -> str:
        if str(path).endswith("/gone/config.v2.json"):  # listed, then removed by the engine
            raise FileNotFoundError(path)
        if str(path).endswith("half/memory.max"):  # its cgroup removed halfway through the reading
            raise FileNotFoundError(path)
        return real_read(path)

    monkeypatch.setattr(plugin, "_read", racing)
    reader, collectd = host.reader()
    reader.read()
    assert {k[0] for k in collectd.dispatched} == {"half", "kept"}
    assert ("half", "memory", "used") not in collectd.dispatched  # no half reading
    assert collectd.dispatched[("half", "count", "restarts")] == 0
    assert not collectd.warnings and not collectd.errors
    # a stopped container has no cgroup at all: its counts, no memory
    host.container("kept", "kept", running=False)
    host.remove_cgroup("kept")
    collectd.dispatched.clear()
    reader.read()
    assert ("kept", "memory", "used") not in collectd.dispatched
    assert ("kept", "count", "oom_kills") in collectd.dispatched


def test_a_broken_record_is_named_and_the_others_still_read(tmp_path: Path) -> None:
    host = Host(tmp_path, 1)
    host.container("ok", "ok")
    host.cgroup("ok", memory=10, limit=100, cpu_seconds=1)
    (host.records / "bad").mkdir()
    (host.records / "bad" / "config.v2.json").write_text("{not json")
    reader, collectd = host.reader()
    reader.read()
    assert ("ok", "memory", "used") in collectd.dispatched
    assert len(collectd.warnings) == 1 and "bad/config.v2.json" in collectd.warnings[0]


def test_no_cgroup_hierarchy_is_said_once_and_clearly(tmp_path: Path) -> None:
    host = Host(tmp_path, 2)
    (host.cgroups / "cgroup.controllers").unlink()  # e.g. the host's /sys/fs/cgroup not mounted there
    host.container("a", "a")
    reader, collectd = host.reader()
    reader.read()
    reader.read()
    assert collectd.dispatched == {}
    assert collectd.errors == [
        f"containers: no cgroup hierarchy under {host.cgroups} (neither v2's cgroup.controllers nor v1's memory/): "
        "mount the host's /sys/fs/cgroup there read-only"
    ]
    reader.containers_dir = str(tmp_path / "nowhere")
    (host.cgroups / "cgroup.controllers").write_text("memory\n")
    reader.read()
    assert "the engine's containers folder" in collectd.errors[-1] and str(tmp_path / "nowhere") in collectd.errors[-1]


@pytest.mark.parametrize("version", [1, 2])
def test_oom_kills_are_counted_once_from_the_cgroup_or_the_engines_record(tmp_path: Path, version: int) -> None:
    host = Host(tmp_path, version)
    host.container("c", "c", started="run1")
    host.cgroup("c", memory=10, limit=100, cpu_seconds=1, oom_kills=4)  # before collectd started: not counted
    reader, collectd = host.reader()
    reader.read()
    assert collectd.dispatched[("c", "count", "oom_kills")] == 0
    # a child process killed, the container lives on: the kernel's count in its cgroup
    host.cgroup("c", memory=10, limit=100, cpu_seconds=1, oom_kills=5)
    reader.read()
    assert collectd.dispatched[("c", "count", "oom_kills")] == 1
    reader.read()
    # the main process killed: the cgroup is gone with it, the engine records the exit and restarts it
    host.remove_cgroup("c")
    host.container("c", "c", started="run2", finished="exit1", oom_killed=True, restarts=1)
    host.cgroup("c", memory=10, limit=100, cpu_seconds=0, oom_kills=0)
    reader.read()
    assert collectd.dispatched[("c", "count", "oom_kills")] == 2
    reader.read()  # the record stays OOMKilled (moby#43564): counted once
    assert collectd.dispatched[("c", "count", "oom_kills")] == 2
    # the kernel's count seen just before the main process died is not counted again by the engine's record
    host.cgroup("c", memory=10, limit=100, cpu_seconds=0, oom_kills=1)
    reader.read()
    host.remove_cgroup("c")
    host.container("c", "c", started="run3", finished="exit2", oom_killed=True, restarts=2)
    host.cgroup("c", memory=10, limit=100, cpu_seconds=0, oom_kills=0)
    reader.read()
    assert collectd.dispatched[("c", "count", "oom_kills")] == 3
    # an ordinary exit is no OOM kill
    host.container("c", "c", started="run4", finished="exit3", oom_killed=False, restarts=3)
    reader.read()
    assert collectd.dispatched[("c", "count", "oom_kills")] == 3
    assert collectd.dispatched[("c", "count", "restarts")] == 3


def test_collectd_conf_lists_every_service_and_the_rules_watch_each(example_plan, example_catalog) -> None:  # type: ignore[no-untyped-def]
    conf = collectd_conf(example_catalog)
    assert conf.count("<LoadPlugin python>") == 1  # one interpreter for both modules
    assert 'Import "containers"' in conf and 'CgroupRoot "/host/sys/fs/cgroup"' in conf
    services = [(s, n) for stack in example_plan.stacks.values() for s, n in [(stack.name, n) for n in stack.services]]
    assert len(services) == 14
    for stack, name in services:
        assert f'    Service "{stack}-{name}" "homelab-{stack}" "{name}"\n' in conf
    specs = {s.uid: s for s in alert_specs(example_plan, example_catalog)}
    oom, restarts = specs["oom-dev-rstudio"], specs["restarts-dev-rstudio"]
    assert oom.target == "nonNegativeDerivative(collectd.nas.container-dev-rstudio.count-oom_kills)"
    assert (oom.reducer, oom.op, oom.threshold) == ("max", "gt", 0)
    assert (restarts.reducer, restarts.op, restarts.threshold) == ("sum", "gt", RESTARTS - 1)
    assert sum(1 for s in specs.values() if s.area == "containers") == 2 * len(services)
