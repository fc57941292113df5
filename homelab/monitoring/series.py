"""The metric catalog: one list of every series collectd will send, derived from config + profile.

The same catalog decides which collectd plugins load (render/collectd.py), the carbon storage
schemas and aggregation, the whisper disk budget (`homelab monitor size`) and every dashboard and
alert query, so none of them can ask for a series collectd does not send.

Series paths follow collectd 5.12's write_graphite with `Prefix "collectd."`, `EscapeCharacter "_"`,
`StoreRates true`, `SeparateInstances false`, `AlwaysAppendDS false`:
`collectd.<host>.<plugin>[-<plugin instance>].<type>[-<type instance>][.<ds>]`, the data source name
appended only for types with several data sources (types.db), every component escaped.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from homelab.monitoring.inventory import Limits

if TYPE_CHECKING:
    from homelab.monitoring.states import StateType
    from homelab.monitoring.watch import Watch

PREFIX = "collectd."
ESCAPE = "_"
# write_graphite replaces these (and '.' inside a component) with the escape character.
_FORBIDDEN = set(' \t"\\:!,/()\n\r.')

# Data source names of the multi-value types used here (collectd 5.12 types.db).
MULTI_DS: dict[str, tuple[str, ...]] = {
    "load": ("shortterm", "midterm", "longterm"),
    "disk_octets": ("read", "write"),
    "disk_ops": ("read", "write"),
    "disk_time": ("read", "write"),
    "disk_io_time": ("io_time", "weighted_io_time"),
    "if_octets": ("rx", "tx"),
    "if_packets": ("rx", "tx"),
    "if_errors": ("rx", "tx"),
    "smart_attribute": ("current", "worst", "threshold", "pretty"),
}

# SMART attributes whose raw ("pretty") value above 0 means a failing disk, by id, with the name
# libatasmart 0.19 gives them (188 has no name in its table: it becomes "attribute-188").
SMART_FAILURE_ATTRIBUTES: dict[int, str] = {
    5: "reallocated-sector-count",
    187: "reported-uncorrect",
    188: "attribute-188",
    197: "current-pending-sector",
    198: "offline-uncorrectable",
}

CPU_STATES = ("user", "system", "wait", "nice", "interrupt", "softirq", "steal", "idle")
MEMORY_STATES = ("used", "buffered", "cached", "free", "slab_recl", "slab_unrecl")
TCP_STATES = ("ESTABLISHED", "TIME_WAIT", "SYN_RECV")

Kind = Literal[
    "temperature",
    "fanspeed",
    "voltage",
    "power",
    "current",
    "percent",
    "bytes",
    "bytes_rate",
    "ops_rate",
    "count",
    "errors_rate",
    "seconds",
    "ratio",
    "timestamp",
    "load",
    "packets_rate",
    "connections",
    "days",
    "state",
]
Aggregation = Literal["average", "max", "min", "last", "sum"]

# Grafana unit per kind.
UNITS: dict[str, str] = {
    "temperature": "celsius",
    "fanspeed": "rotrpm",
    "voltage": "volt",
    "power": "watt",
    "current": "amp",
    "percent": "percent",
    "bytes": "bytes",
    "bytes_rate": "Bps",
    "ops_rate": "iops",
    "count": "short",
    "errors_rate": "short",
    "seconds": "s",
    "ratio": "percent",
    "timestamp": "dateTimeFromNow",
    "load": "short",
    "packets_rate": "pps",
    "connections": "short",
    "days": "d",
    "state": "none",
}

# Temperatures keep their peaks, fans their troughs (a fan that stopped for a minute must still show),
# SMART counters and timestamps their latest, days to a certificate's expiry their lowest, a discrete
# sensor's state bits the last seen (an average of bit masks means nothing); everything else is averaged.
AGGREGATION: dict[str, Aggregation] = {
    "temperature": "max",
    "fanspeed": "min",
    "count": "max",
    "timestamp": "max",
    "days": "min",
    "state": "last",
}


def escape(component: str) -> str:
    """One path component as write_graphite writes it."""
    return "".join(ESCAPE if c in _FORBIDDEN or ord(c) < 32 else c for c in component)


@dataclass(frozen=True)
class Series:
    """One Graphite series, with the collectd identifier that produces it."""

    host: str
    plugin: str
    plugin_instance: str
    type: str
    type_instance: str
    ds: str | None  # data source name when the type has several
    kind: Kind
    label: str  # human name for legends and alerts
    cpu: bool = False  # a CPU temperature
    limits: Limits = field(default_factory=Limits)  # the sensor's own alert limits (BMC or profile)
    states: int | None = None  # a discrete sensor's asserted states at discovery (its normal)
    state_type: StateType | None = None  # a discrete sensor's IPMI sensor type (names its state bits)
    watch: Watch | None = None  # a BMC sensor's limits, baseline and silent rules (monitoring/watch.py)
    fahrenheit: bool = False  # collectd sends °F (the BMC's unit): queries convert it

    @property
    def target(self) -> str:
        """The Graphite target of its values in the catalog's unit (°C for a sensor the BMC reads in °F)."""
        if self.fahrenheit:
            return f"offset(scale({self.path},{5 / 9:.6f}),{-160 / 9:.6f})"
        return self.path

    @property
    def path(self) -> str:
        plugin = escape(self.plugin) + (f"-{escape(self.plugin_instance)}" if self.plugin_instance else "")
        type_ = escape(self.type) + (f"-{escape(self.type_instance)}" if self.type_instance else "")
        path = f"{PREFIX}{escape(self.host)}.{plugin}.{type_}"
        return f"{path}.{escape(self.ds)}" if self.ds else path

    @property
    def identifier(self) -> str:
        """collectd's identifier (`host/plugin-instance/type-instance`), as exec's PUTVAL takes it."""
        plugin = self.plugin + (f"-{self.plugin_instance}" if self.plugin_instance else "")
        type_ = self.type + (f"-{self.type_instance}" if self.type_instance else "")
        return f"{self.host}/{plugin}/{type_}"

    @property
    def unit(self) -> str:
        return UNITS[self.kind]

    @property
    def aggregation(self) -> Aggregation:
        return AGGREGATION.get(self.kind, "average")


@dataclass(frozen=True)
class Plugin:
    """One collectd plugin to load, with what the config template needs to configure it."""

    name: str
    options: dict[str, object] = field(default_factory=dict)
    needs_hardware: bool = False  # reads devices/files a sandbox does not have (tests stand in for it)


@dataclass(frozen=True)
class Retention:
    precision: int  # seconds per point
    points: int

    @property
    def seconds(self) -> int:
        return self.precision * self.points

    def __str__(self) -> str:
        return f"{_duration(self.precision, 'smh')}:{_duration(self.seconds, 'dy')}"


@dataclass(frozen=True)
class Catalog:
    host: str
    interval: int
    plugins: tuple[Plugin, ...]
    series: tuple[Series, ...]
    retentions: tuple[Retention, ...]

    def paths(self) -> list[str]:
        return [s.path for s in self.series]

    def plugin(self, name: str) -> Plugin | None:
        return next((p for p in self.plugins if p.name == name), None)

    def select(
        self,
        plugin: str | None = None,
        type: str | None = None,
        plugin_instance: str | None = None,
        kind: str | None = None,
        ds: str | None = None,
    ) -> list[Series]:
        return [
            s
            for s in self.series
            if (plugin is None or s.plugin == plugin)
            and (type is None or s.type == type)
            and (plugin_instance is None or s.plugin_instance == plugin_instance)
            and (kind is None or s.kind == kind)
            and (ds is None or s.ds == ds)
        ]

    def one(self, **criteria: str) -> Series:
        found = [s for s in self.series if all(getattr(s, k) == v for k, v in criteria.items())]
        if len(found) != 1:
            raise LookupError(f"{len(found)} series match {criteria}")
        return found[0]

    def by_plugin(self) -> dict[str, list[Series]]:
        grouped: dict[str, list[Series]] = {}
        for s in self.series:
            grouped.setdefault(s.plugin, []).append(s)
        return grouped

    # storage -------------------------------------------------------------------------------------
    @property
    def retentions_text(self) -> str:
        return ",".join(str(r) for r in self.retentions)

    def storage_schemas(self) -> list[tuple[str, str, str]]:
        """(section, pattern, retentions); carbon takes the first match."""
        return [
            ("carbon", r"^carbon\.", "60s:90d"),
            ("collectd", rf"^{re.escape(PREFIX)}", self.retentions_text),
            ("default", ".*", self.retentions_text),
        ]

    def storage_aggregation(self) -> list[tuple[str, str, float, Aggregation]]:
        """(section, pattern, xFilesFactor, method), one per method the catalog uses, then the default."""
        rules: list[tuple[str, str, float, Aggregation]] = []
        methods: dict[Aggregation, list[Series]] = {}
        for s in self.series:
            if s.aggregation != "average":
                methods.setdefault(s.aggregation, []).append(s)
        for method, members in sorted(methods.items()):
            types = sorted({s.type for s in members})
            pattern = rf"^{re.escape(PREFIX)}[^.]+\.[^.]+\.({'|'.join(map(re.escape, types))})(-[^.]*)?(\.[^.]+)?$"
            rules.append((f"collectd_{method}", pattern, 0.0, method))
        rules.append(("default", ".*", 0.0, "average"))
        return rules

    def aggregation_for(self, path: str) -> Aggregation:
        """What carbon's storage-aggregation.conf (first match) picks for a path."""
        for _name, pattern, _xff, method in self.storage_aggregation():
            if re.search(pattern, path):
                return method
        return "average"

    def whisper_bytes_per_series(self) -> int:
        return whisper_size(self.retentions)

    def whisper_bytes(self) -> int:
        return len(self.series) * self.whisper_bytes_per_series()


def _duration(seconds: int, units: str) -> str:
    table = {"s": 1, "m": 60, "h": 3600, "d": 86400, "y": 365 * 86400}
    for unit in reversed(units):
        if seconds % table[unit] == 0:
            return f"{seconds // table[unit]}{unit}"
    return f"{seconds}s"


def retentions(interval: int) -> tuple[Retention, ...]:
    """10 s data kept at decreasing resolution for 5 years: `<interval>:1d, 1m:30d, 10m:1y, 1h:5y`,
    each coarser precision rounded up to a multiple of the finer one (whisper requires it)."""
    plan = [(interval, 86400), (60, 30 * 86400), (600, 365 * 86400), (3600, 5 * 365 * 86400)]
    result: list[Retention] = []
    for precision, keep in plan:
        if result:
            finer = result[-1].precision
            precision = max(finer, math.ceil(precision / finer) * finer)
            if precision == finer:
                # same precision as the finer archive: just extend it
                last = result.pop()
                result.append(Retention(finer, max(last.points, keep // finer)))
                continue
        result.append(Retention(precision, keep // precision))
    return tuple(result)


def whisper_size(archives: tuple[Retention, ...] | list[Retention]) -> int:
    """Bytes of one whisper file: 16-byte header, 12 bytes per archive header, 12 per point."""
    return 16 + 12 * len(archives) + 12 * sum(a.points for a in archives)


def df_instance(mountpoint: str) -> str:
    """collectd df's plugin instance for a mountpoint: '/' -> 'root', '/tank/media' -> 'tank-media'."""
    if mountpoint == "/":
        return "root"
    return mountpoint.strip("/").replace("/", "-")
