"""A collectd python plugin (collectd 5.12's python.so, inside collectd, in the collectd image) for each
container's memory, CPU, OOM kills and restarts: collectd 5.12 has no container plugin, and its `cgroups`
plugin reads only cgroup v1's cpuacct. homelab never imports it: render/monitoring.py ships this file.

Per container it reads the kernel's cgroup files, v2 (a unified hierarchy) or v1 (one per controller):

    memory in use   memory.current - inactive_file (v2) | memory.usage_in_bytes - total_inactive_file (v1)
                    (what `docker stats` shows, docs.docker.com/reference/cli/docker/container/stats)
    memory limit    memory.max, "max" for none (v2) | memory.limit_in_bytes, ~2^63 for none (v1)
    CPU             cpu.stat usage_usec (v2) | cpuacct.usage in ns (v1): percent of one core
    OOM kills       memory.events oom_kill (v2) | memory.oom_control oom_kill (v1)

and the engine's own record of each container, `<containers dir>/<id>/config.v2.json` (name, labels,
RestartCount, State.OOMKilled, State.FinishedAt), read-only: no API, no socket (docs/monitoring.md).

A container's cgroup ends with its main process, so the kernel's oom_kill count dies with it when the
killer takes that process; the engine's record keeps that kill (State.OOMKilled of the exit at
FinishedAt). OOM kills are counted from both, once per run of a container, since collectd started:
`container-<key>/count-oom_kills`. `count-restarts` is the engine's RestartCount.

collectd.conf configures it (render/templates/collectd.conf.j2):

    <Module containers>
      CgroupRoot "/host/sys/fs/cgroup"                 # the host's /sys/fs/cgroup, mounted read-only
      ContainersDir "/host/var/lib/docker/containers"  # the engine's containers folder, read-only
      Service "<key>" "<compose project>" "<service>"  # a planned service: its series' name
    </Module>

A container of a listed service (Compose's or Swarm's labels) is named by its key, any other one by its
container name.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PLUGIN = "container"
NO_LIMIT_V1 = 1 << 62  # v1 prints PAGE_COUNTER_MAX pages (9223372036854771712 with 4 KiB pages) for none
# where Docker puts a container's cgroup: cgroupfs driver, then systemd driver (relative to a hierarchy)
PLACES = ("docker/{id}", "system.slice/docker-{id}.scope")
COMPOSE_PROJECT, COMPOSE_SERVICE = "com.docker.compose.project", "com.docker.compose.service"
STACK_NAMESPACE, SWARM_SERVICE = "com.docker.stack.namespace", "com.docker.swarm.service.name"


class Unreadable(Exception):
    """No cgroup hierarchy (neither v2 with its memory controller nor v1's memory) under the configured root,
    or no containers folder."""


@dataclass(frozen=True)
class Layout:
    """Where one cgroup version keeps each controller's files, relative to the cgroup root."""

    version: int
    memory: str  # the hierarchy holding the memory files
    cpu: str  # the hierarchy holding the CPU usage file


def layout(root: str) -> Layout:
    controllers = Path(root) / "cgroup.controllers"
    if controllers.is_file():
        available = _read(controllers).split()
        if "memory" not in available:  # e.g. a hybrid host's unified/: memory is bound to its v1 hierarchy
            raise Unreadable(
                f"containers: the cgroup v2 hierarchy under {root} has no memory controller (its "
                f"cgroup.controllers: {' '.join(available) or 'none'}), so no container's memory.current: "
                "mount the host's /sys/fs/cgroup itself there read-only"
            )
        return Layout(2, "", "")
    if (Path(root) / "memory").is_dir():
        cpu = next((d for d in ("cpuacct", "cpu,cpuacct") if (Path(root) / d).is_dir()), "cpuacct")
        return Layout(1, "memory", cpu)
    raise Unreadable(
        f"containers: no cgroup hierarchy under {root} (neither v2's cgroup.controllers nor v1's memory/): "
        "mount the host's /sys/fs/cgroup there read-only"
    )


@dataclass(frozen=True)
class Record:
    """What the engine keeps of one container (config.v2.json)."""

    id: str
    name: str
    labels: dict[str, str]
    running: bool
    restarts: int
    oom_killed: bool  # its last exit was the OOM killer's
    finished_at: str  # its last exit
    started_at: str  # its current (or last) run


def record(text: str) -> Record:
    data = json.loads(text)
    state = data.get("State") or {}
    return Record(
        id=str(data["ID"]),
        name=str(data.get("Name", "")).lstrip("/"),
        labels=dict((data.get("Config") or {}).get("Labels") or {}),
        running=bool(state.get("Running")),
        restarts=int(data.get("RestartCount") or 0),
        oom_killed=bool(state.get("OOMKilled")),
        finished_at=str(state.get("FinishedAt", "")),
        started_at=str(state.get("StartedAt", "")),
    )


@dataclass(frozen=True)
class Usage:
    """One read of a running container's cgroup."""

    memory: int
    limit: int | None  # None: no limit
    cpu_seconds: float
    oom_kills: int  # in this cgroup, i.e. this run of the container


def _read(path: Path) -> str:
    return path.read_text(encoding="ascii")


def _keyed(text: str) -> dict[str, int]:
    """`key value` lines (memory.stat, memory.events, cpu.stat, memory.oom_control)."""
    pairs = (line.split() for line in text.splitlines())
    return {p[0]: int(p[1]) for p in pairs if len(p) == 2 and p[1].isdigit()}


def cgroup_dir(root: str, hierarchy: str, container_id: str) -> Path | None:
    for place in PLACES:
        path = Path(root) / hierarchy / place.format(id=container_id)
        if path.is_dir():
            return path
    return None


def usage(root: str, found: Layout, container_id: str) -> Usage | None:
    """None when the container has no cgroup (any more): it stopped between listing and reading."""
    memory = cgroup_dir(root, found.memory, container_id)
    cpu = cgroup_dir(root, found.cpu, container_id)
    if memory is None or cpu is None:
        return None
    try:
        if found.version == 2:
            stat = _keyed(_read(memory / "memory.stat"))
            used = int(_read(memory / "memory.current")) - stat.get("inactive_file", 0)
            raw = _read(memory / "memory.max").strip()
            limit = None if raw == "max" else int(raw)
            cpu_seconds = _keyed(_read(cpu / "cpu.stat"))["usage_usec"] / 1e6
            kills = _keyed(_read(memory / "memory.events")).get("oom_kill", 0)
        else:
            stat = _keyed(_read(memory / "memory.stat"))
            used = int(_read(memory / "memory.usage_in_bytes")) - stat.get("total_inactive_file", 0)
            value = int(_read(memory / "memory.limit_in_bytes"))
            limit = None if value >= NO_LIMIT_V1 else value
            cpu_seconds = int(_read(cpu / "cpuacct.usage")) / 1e9
            kills = _keyed(_read(memory / "memory.oom_control")).get("oom_kill", 0)
    except (FileNotFoundError, ProcessLookupError):  # removed while being read
        return None
    return Usage(max(used, 0), limit, cpu_seconds, kills)


@dataclass
class Totals:
    """The values of one series key (a service's containers added up)."""

    memory: int = 0
    limit: int | None = 0
    cpu_percent: float | None = None
    oom_kills: int = 0
    restarts: int = 0
    running: int = 0


@dataclass
class Seen:
    """A container's last read: its CPU time, and which kills of the current run were counted."""

    cpu: tuple[float, float] | None = None  # (cpu seconds, monotonic time)
    run: str = ""  # StartedAt of the run whose cgroup kills are counted below
    cgroup_kills: int = 0
    fresh: bool = False  # the latest read of that run saw the kernel count a kill
    finished_at: str = ""


@dataclass
class Reader:
    collectd: Any
    cgroup_root: str = "/sys/fs/cgroup"
    containers_dir: str = "/var/lib/docker/containers"
    services: dict[tuple[str, str], str] = field(default_factory=dict)  # (project, service) -> key
    seen: dict[str, Seen] = field(default_factory=dict)  # container id -> its last read
    oom_kills: dict[str, int] = field(default_factory=dict)  # key -> OOM kills counted since start
    complained: str = ""

    def configure(self, node: Any) -> None:
        for child in node.children:
            key = child.key.lower()
            if key == "cgrouproot":
                self.cgroup_root = str(child.values[0])
            elif key == "containersdir":
                self.containers_dir = str(child.values[0])
            elif key == "service":
                self.services[(str(child.values[1]), str(child.values[2]))] = str(child.values[0])

    def key(self, found: Record) -> str:
        labels = found.labels
        project = labels.get(COMPOSE_PROJECT) or labels.get(STACK_NAMESPACE, "")
        service = labels.get(COMPOSE_SERVICE) or labels.get(SWARM_SERVICE, "").removeprefix(f"{project}_")
        return self.services.get((project, service), found.name)

    def records(self) -> list[Record]:
        try:
            ids = sorted(p.name for p in Path(self.containers_dir).iterdir())
        except OSError as exc:
            raise Unreadable(f"containers: the engine's containers folder {self.containers_dir}: {exc}") from exc
        found = []
        for container_id in ids:
            try:
                found.append(record(_read(Path(self.containers_dir) / container_id / "config.v2.json")))
            except FileNotFoundError:  # removed since the listing
                continue
            except (OSError, ValueError, KeyError, UnicodeDecodeError) as exc:
                self.collectd.warning(f"containers: {container_id}/config.v2.json: {exc}")
        return found

    def _kills(self, found: Record, now: Usage | None) -> int:
        """OOM kills of this container since the last read: the kernel's count in its current cgroup, and
        an exit by the OOM killer the engine recorded, unless the run's last read already saw the kernel
        count that kill (read just before the cgroup went)."""
        seen = self.seen.get(found.id)
        if seen is None:  # first read: what happened before collectd started is not counted
            kills = now.oom_kills if now is not None else 0
            self.seen[found.id] = Seen(run=found.started_at, cgroup_kills=kills, finished_at=found.finished_at)
            return 0
        new = 0
        if found.finished_at != seen.finished_at:  # it exited since the last read
            if found.oom_killed and not seen.fresh:
                new += 1
            seen.finished_at, seen.run, seen.cgroup_kills, seen.fresh = found.finished_at, "", 0, False
        if now is not None:
            if seen.run != found.started_at:  # a new run: a new cgroup, counting from 0
                seen.run, seen.cgroup_kills = found.started_at, 0
            counted = max(now.oom_kills - seen.cgroup_kills, 0)
            new += counted
            seen.cgroup_kills, seen.fresh = max(now.oom_kills, seen.cgroup_kills), counted > 0
        return new

    def _cpu_percent(self, container_id: str, now: Usage) -> float | None:
        seen, at = self.seen[container_id], time.monotonic()
        before, seen.cpu = seen.cpu, (now.cpu_seconds, at)
        if before is None or now.cpu_seconds < before[0] or at <= before[1]:
            return None  # first read, or a new cgroup
        return 100 * (now.cpu_seconds - before[0]) / (at - before[1])

    def totals(self) -> dict[str, Totals]:
        found = layout(self.cgroup_root)
        result: dict[str, Totals] = {}
        records = self.records()
        for container in records:
            now = usage(self.cgroup_root, found, container.id) if container.running else None
            key = self.key(container)
            total = result.setdefault(key, Totals())
            self.oom_kills[key] = self.oom_kills.get(key, 0) + self._kills(container, now)
            total.oom_kills, total.restarts = self.oom_kills[key], total.restarts + container.restarts
            if now is None:
                continue
            total.running += 1
            total.memory += now.memory
            total.limit = None if now.limit is None or total.limit is None else total.limit + now.limit
            cpu = self._cpu_percent(container.id, now)
            if cpu is not None:
                total.cpu_percent = (total.cpu_percent or 0.0) + cpu
        gone = set(self.seen) - {c.id for c in records}
        for container_id in gone:
            del self.seen[container_id]
        return result

    def read(self) -> None:
        try:
            totals = self.totals()
        except Unreadable as exc:
            if str(exc) != self.complained:  # once, not every interval
                self.collectd.error(str(exc))
                self.complained = str(exc)
            return
        self.complained = ""
        for key, total in sorted(totals.items()):
            values: list[tuple[str, str, float]] = [
                ("count", "oom_kills", total.oom_kills),
                ("count", "restarts", total.restarts),
            ]
            if total.running:
                values.append(("memory", "used", total.memory))
                if total.limit is not None:
                    values.append(("memory", "limit", total.limit))
                if total.cpu_percent is not None:
                    values.append(("percent", "cpu", total.cpu_percent))
            for type_, type_instance, value in values:
                self.collectd.Values(
                    plugin=PLUGIN, plugin_instance=key, type=type_, type_instance=type_instance
                ).dispatch(values=[value])


def register(collectd: Any) -> Reader:
    reader = Reader(collectd)
    collectd.register_config(reader.configure)
    collectd.register_read(reader.read)
    return reader


try:  # inside collectd: the embedded module is there
    import collectd as _collectd  # type: ignore[import-not-found]
except ImportError:  # imported by a test
    pass
else:
    register(_collectd)
