"""The dashboards, built with the official grafana-foundation-sdk (imported lazily: only rendering needs
it). It has no Graphite query type; `_graphite_target` makes one (`{"refId", "target"}`, what Grafana's
Graphite datasource stores). Every series comes from homelab/monitoring/selections.py, as the alert
rules' do."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any, Literal

from homelab.monitoring import selections as pick
from homelab.monitoring.inventory import Limits
from homelab.monitoring.series import Catalog, Series
from homelab.monitoring.states import StateType, changes, words
from homelab.render.grafana import DATASOURCE_UID

DS_LABEL = {
    "read": "read",
    "write": "write",
    "rx": "in",
    "tx": "out",
    "io_time": "busy",
    "shortterm": "1 min",
    "midterm": "5 min",
    "longterm": "15 min",
}


@dataclass(frozen=True)
class Panel:
    title: str
    unit: str
    targets: tuple[str, ...]
    kind: Literal["timeseries", "stat"] = "timeseries"
    width: int = 12
    limits: tuple[tuple[str, Limits], ...] = ()  # (legend name, the sensor's limits) drawn as lines
    # (legend name, a discrete sensor's states at discovery, its IPMI sensor type)
    normal: tuple[tuple[str, int, StateType], ...] = ()


def _steps(limits: Limits) -> list[dict[str, Any]]:
    """Grafana threshold steps: red below the lower critical limit, orange in the non-critical bands."""
    low, high = limits.lower_critical, limits.upper_critical
    steps: list[dict[str, Any]] = [{"color": "red" if low is not None else "green", "value": None}]
    points = [
        (low, "green"),
        (limits.upper_non_critical, "orange"),
        (high, "red"),
    ]
    steps += [{"color": color, "value": value} for value, color in points if value is not None]
    return steps


def _state_override(name: str, states: int, type_: StateType) -> dict[str, Any]:
    """A discrete sensor shows "as discovered" and its states in words, in green, while its states are
    those `discover` saw; a state one bit away in words (a supply failed, a fan gone), in red; any other
    the states number (the bits of `ipmitool sensor`'s status column) in orange."""
    options = {str(states): {"text": f"as discovered: {words(states, type_)}", "color": "green", "index": 0}}
    for index, (value, text) in enumerate(changes(states, type_), start=1):
        options[str(value)] = {"text": text, "color": "red", "index": index}
    mapping = {"type": "value", "options": options}
    return {
        "matcher": {"id": "byName", "options": name},
        "properties": [
            {"id": "mappings", "value": [mapping]},
            {"id": "color", "value": {"mode": "fixed", "fixedColor": "orange"}},
        ],
    }


def _overrides(panel: Panel) -> list[dict[str, Any]]:
    return [_state_override(name, states, type_) for name, states, type_ in panel.normal] + [
        {
            "matcher": {"id": "byName", "options": name},
            "properties": [
                {"id": "thresholds", "value": {"mode": "absolute", "steps": _steps(limits)}},
                {"id": "custom.thresholdsStyle", "value": {"mode": "line"}},
            ],
        }
        for name, limits in panel.limits
        if limits.lower_critical is not None or limits.upper_critical is not None
    ]


def _legend(series: Series, label: str | None = None) -> str:
    return (label or series.label).replace("'", "")


def _alias(series: Series, label: str | None = None) -> str:
    return f"alias({series.target},'{_legend(series, label)}')"


def _with_ds(series: list[Series]) -> tuple[str, ...]:
    return tuple(_alias(s, f"{s.label} {DS_LABEL.get(s.ds or '', s.ds)}") for s in series)


def _series(
    title: str, series: list[Series], kind: Literal["timeseries", "stat"] = "timeseries", width: int = 12
) -> list[Panel]:
    if not series:
        return []
    limits = tuple((_legend(s), s.limits) for s in series)
    return [Panel(title, series[0].unit, tuple(_alias(s) for s in series), kind, width, limits)]


def _health(c: Catalog) -> list[Panel]:
    return [
        *_series("CPU", [s for s in c.select(plugin="cpu") if s.type_instance != "idle"]),
        Panel("Load", "short", _with_ds(c.select(plugin="load"))),
        *_series("Memory", c.select(plugin="memory")),
        *_series("Uptime", c.select(plugin="uptime"), kind="stat", width=6),
        *_series("Last successful backup", c.select(plugin="backup", type="timestamp"), kind="stat", width=6),
        *_series("Days since the last good recovery drill", pick.recovery_drill(c, "age_days"), kind="stat", width=6),
        *_series("CPU temperature", pick.cpu_temperatures(c)),
    ]


def _thermals(c: Catalog) -> list[Panel]:
    return [
        *_series("BMC temperatures", pick.bmc(c, "temperature")),
        *_series(
            "CPU sensors and thermal zones", c.select(plugin="sensors", kind="temperature") + c.select(plugin="thermal")
        ),
        *_series("Disk temperatures", pick.disk_temperatures(c)),
        *_series("Fans", [s for s in pick.fans(c) if s.type == "fanspeed"]),
        *_series("Fan duty", [s for s in pick.fans(c) if s.type == "percent"]),
        *_series("Voltages", pick.bmc(c, "voltage")),
        *_series("Power", pick.bmc(c, "power") + pick.bmc(c, "current")),
        *_states("BMC status (discrete sensors)", pick.bmc_states(c)),
        *_series("New SEL entries per interval", pick.sel_counts(c), width=24),
    ]


def _states(title: str, series: list[Series]) -> list[Panel]:
    if not series:
        return []
    normal = tuple((_legend(s), s.states, s.state_type or "unknown") for s in series if s.states is not None)
    return [Panel(title, series[0].unit, tuple(_alias(s) for s in series), "stat", 24, normal=normal)]


def _disks(c: Catalog) -> list[Panel]:
    panels: list[Panel] = []
    pool = pick.pool_used_percent_target(c)
    if pool:
        panels.append(Panel("Pool used", "percent", (f"alias({pool},'pool used')",), "stat", 6))
    panels += _series("Dataset use", pick.dataset_used(c), width=18)
    panels.append(Panel("Disk throughput", "Bps", _with_ds(c.select(plugin="disk", type="disk_octets"))))
    panels.append(Panel("Disk operations", "iops", _with_ds(c.select(plugin="disk", type="disk_ops"))))
    smart = []
    for disk in sorted({s.plugin_instance for s in c.select(plugin="smart")}):
        attrs = pick.smart_failure_counters(c, disk)
        if attrs:
            smart.append(f"alias({pick.max_series(attrs)},'{disk}')")
    if smart:
        panels.append(Panel("SMART failure counters (5/187/188/197/198)", "short", tuple(smart)))
    panels += _series("SMART bad sectors", c.select(plugin="smart", type="smart_badsectors"))
    panels += _series("ZFS ARC size", c.select(plugin="zfs_arc", type="cache_size"))
    panels += _series("ZFS ARC hit ratio", c.select(plugin="zfs_arc", type="cache_ratio"))
    return panels


def _network(c: Catalog) -> list[Panel]:
    return [
        Panel("Traffic", "Bps", _with_ds(c.select(plugin="interface", type="if_octets"))),
        Panel("Packets", "pps", _with_ds(c.select(plugin="interface", type="if_packets"))),
        Panel("Errors", "short", _with_ds(c.select(plugin="interface", type="if_errors"))),
        *_series("Edge connections", c.select(plugin="tcpconns"), width=24),
        *_series("Certificate days left", pick.certificate_days_left(c), width=24),
    ]


def _containers(c: Catalog) -> list[Panel]:
    """Each service's containers: a runaway shows as memory reaching its limit, OOM kills and restarts."""
    return [
        *_series("Memory in use and limit", pick.container_memory(c), width=24),
        *_series("CPU (percent of one core)", pick.container_cpu(c), width=24),
        *_series("OOM kills (since collectd started)", pick.container_oom_kills(c)),
        *_series("Restarts", pick.container_restarts(c)),
    ]


@functools.cache
def _graphite_classes() -> tuple[Any, Any]:
    """The Graphite query and its builder, made once (two classes per target cost ~6 ms of each render)."""
    from grafana_foundation_sdk.cog import variants
    from grafana_foundation_sdk.cog.builder import Builder

    class GraphiteQuery(variants.Dataquery):
        def __init__(self, ref_id: str, target: str) -> None:
            self.ref_id, self.target = ref_id, target

        def to_json(self) -> dict[str, str]:
            return {"refId": self.ref_id, "target": self.target}

    class GraphiteTarget(Builder[GraphiteQuery]):
        def __init__(self, query: GraphiteQuery) -> None:
            self.query = query

        def build(self) -> GraphiteQuery:
            return self.query

    return GraphiteQuery, GraphiteTarget


def _graphite_target(ref_id: str, target: str) -> Any:
    query, builder = _graphite_classes()
    return builder(query(ref_id, target))


def _build_panel(spec: Panel) -> Any:
    from grafana_foundation_sdk.builders import stat, timeseries
    from grafana_foundation_sdk.models.dashboard import DataSourceRef

    builder = (stat.Panel() if spec.kind == "stat" else timeseries.Panel()).title(spec.title).unit(spec.unit)
    builder = builder.datasource(DataSourceRef(type_val="graphite", uid=DATASOURCE_UID)).height(8).span(spec.width)
    for index, target in enumerate(spec.targets):
        builder = builder.with_target(_graphite_target(chr(ord("A") + index), target))
    return builder


def _board(host: str, uid: str, title: str, panels: list[Panel]) -> dict[str, Any]:
    from grafana_foundation_sdk.builders import dashboard
    from grafana_foundation_sdk.cog.encoder import JSONEncoder

    builder = dashboard.Dashboard(title).uid(uid).tags(["homelab", host]).refresh("1m").time("now-6h", "now")
    builder = builder.timezone("browser")
    for spec in panels:
        builder = builder.with_panel(_build_panel(spec))
    built: dict[str, Any] = json.loads(json.dumps(builder.build(), cls=JSONEncoder))
    for number, (p, spec) in enumerate(zip(built["panels"], panels, strict=True), start=1):
        p["id"] = number
        overrides = _overrides(spec)
        if overrides:
            p.setdefault("fieldConfig", {})["overrides"] = overrides
    return built


def dashboards(catalog: Catalog) -> dict[str, dict[str, Any]]:
    """file name -> dashboard JSON. Every target names only catalog series (tests check it)."""
    host = catalog.host
    return {
        "server-health": _board(host, "homelab-server-health", "Server health", _health(catalog)),
        "thermals-fans": _board(host, "homelab-thermals-fans", "Thermals & fans", _thermals(catalog)),
        "disks-zfs": _board(host, "homelab-disks-zfs", "Disks & ZFS", _disks(catalog)),
        "network-edge": _board(host, "homelab-network-edge", "Network & edge", _network(catalog)),
        "containers": _board(host, "homelab-containers", "Containers", _containers(catalog)),
    }


def dashboard_targets(boards: dict[str, dict[str, Any]]) -> list[str]:
    return [t["target"] for b in boards.values() for p in b["panels"] for t in p.get("targets", [])]
