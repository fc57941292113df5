"""The monitoring stack's files, all from the one metric catalog (homelab/metrics.py): collectd's
config and image, carbon's config, storage schemas and aggregation, Grafana's provisioning
(datasource, dashboard provider, alert rules, contact point) and the dashboards."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from homelab.errors import ConfigError
from homelab.metrics import ESCAPE, PREFIX, SMART_FAILURE_ATTRIBUTES, Catalog, Series, catalog_for
from homelab.plan import CARBON_PORT, Plan
from homelab.render import GENERATED_MARK, Rendering
from homelab.render.templating import render_template
from homelab.render.yamldump import dump

DATASOURCE_UID = "graphite"
GRAPHITE_URL = "http://graphite:80"
SOCKET = "/run/collectd.sock"
IPMI_INCLUDE = "/etc/collectd/ipmi.conf"
IPMI_SECRET = "monitoring_collectd_ipmi_conf"  # noqa: S105 - the secret file's name
EXEC_USER = "nobody"
BACKUP_STATUS_PROGRAM = "/usr/local/lib/homelab/backup-status"
FOLDER = "Homelab"


@dataclass(frozen=True)
class StandIn:
    """An exec program that sends series in place of a plugin the machine cannot feed (tests)."""

    program: str
    why: str


def render(plan: Plan, rendering: Rendering, secret_values: dict[str, str]) -> None:
    catalog = catalog_for(plan)
    config = plan.config
    rendering.add("monitoring/collectd/collectd.conf", collectd_conf(catalog))
    rendering.add("monitoring/collectd/Dockerfile", render_template("collectd.Dockerfile.j2", exec_user=EXEC_USER))
    rendering.add("monitoring/collectd/backup-status", backup_status_script(plan))
    ipmi = config.monitoring.ipmi
    if ipmi.mode == "lan":
        assert ipmi.password_file is not None
        rendering.secret_files[IPMI_SECRET] = ipmi_conf(
            ipmi.address or "", ipmi.username or "", secret_values[ipmi.password_file]
        ).encode()
    rendering.add("monitoring/graphite/carbon.conf", carbon_conf(catalog))
    rendering.add("monitoring/graphite/storage-schemas.conf", storage_schemas(catalog))
    rendering.add("monitoring/graphite/storage-aggregation.conf", storage_aggregation(catalog))
    rendering.add(
        "monitoring/grafana/provisioning/datasources/graphite.yaml", dump(datasource(), header=GENERATED_MARK)
    )
    rendering.add(
        "monitoring/grafana/provisioning/dashboards/homelab.yaml", dump(dashboard_provider(), header=GENERATED_MARK)
    )
    rendering.add(
        "monitoring/grafana/provisioning/alerting/rules.yaml", dump(alert_rules(plan, catalog), header=GENERATED_MARK)
    )
    contact = contact_points(plan)
    if contact:
        rendering.add(
            "monitoring/grafana/provisioning/alerting/contact-points.yaml", dump(contact, header=GENERATED_MARK)
        )
    for name, board in dashboards(catalog).items():
        rendering.add(f"monitoring/grafana/dashboards/{name}.json", json.dumps(board, indent=2, sort_keys=True) + "\n")


# collectd ------------------------------------------------------------------------------------------
def collectd_conf(
    catalog: Catalog,
    *,
    carbon_host: str = "127.0.0.1",
    carbon_port: int = CARBON_PORT,
    socket: str = SOCKET,
    ipmi_include: str = IPMI_INCLUDE,
    replace: dict[str, StandIn] | None = None,
) -> str:
    """collectd.conf for the catalog. `replace` swaps plugins for exec stand-ins (tests only)."""
    replace = replace or {}
    plugins = [p for p in catalog.plugins if p.name not in replace]
    return render_template(
        "collectd.conf.j2",
        host=catalog.host,
        interval=catalog.interval,
        socket=socket,
        plugins=plugins,
        stand_ins=list(replace.values()),
        ipmi_include=ipmi_include,
        exec_user=EXEC_USER,
        backup_status_program=BACKUP_STATUS_PROGRAM,
        carbon_host=carbon_host,
        carbon_port=carbon_port,
        prefix=PREFIX,
        escape=ESCAPE,
    )


def _collectd_string(value: str, what: str) -> str:
    if any(c in value for c in "\n\r\0"):
        raise ConfigError([f"{what}: contains a line break, which collectd.conf cannot hold"])
    return value.replace("\\", "\\\\").replace('"', '\\"')


def ipmi_conf(address: str, username: str, password: str, instance: str = "bmc") -> str:
    return render_template(
        "collectd-ipmi.conf.j2",
        instance=instance,
        address=_collectd_string(address, "monitoring.ipmi.address"),
        username=_collectd_string(username, "monitoring.ipmi.username"),
        password=_collectd_string(password, "monitoring.ipmi.password_file"),
    )


def backup_status_script(plan: Plan) -> str:
    return render_template(
        "collectd-backup-status.sh.j2",
        host=plan.config.server.hostname,
        interval=plan.config.monitoring.interval,
        status_dir=plan.config.backup_state_dir,
    )


# carbon --------------------------------------------------------------------------------------------
def max_creates_per_minute(catalog: Catalog) -> int:
    """Carbon's default of 50 new files a minute leaves a fresh install's dashboards empty for many
    minutes: allow every series of the catalog (and headroom for extra sensors) in the first minute."""
    return max(1000, 2 * len(catalog.series))


def carbon_conf(catalog: Catalog, storage_dir: str = "/opt/graphite/storage", line_port: int = 2003) -> str:
    cache = {
        "STORAGE_DIR": f"{storage_dir}/",
        "LOCAL_DATA_DIR": f"{storage_dir}/whisper/",
        "WHITELISTS_DIR": f"{storage_dir}/lists/",
        "LOG_DIR": f"{storage_dir}/log/",
        "PID_DIR": f"{storage_dir}/",
        "ENABLE_LOGROTATION": "True",
        "USER": "",
        "MAX_CACHE_SIZE": "inf",
        "MAX_UPDATES_PER_SECOND": "500",
        "MAX_CREATES_PER_MINUTE": str(max_creates_per_minute(catalog)),
        "LINE_RECEIVER_INTERFACE": "0.0.0.0",  # noqa: S104 - inside the container; published on 127.0.0.1
        "LINE_RECEIVER_PORT": str(line_port),
        "ENABLE_UDP_LISTENER": "False",
        "PICKLE_RECEIVER_INTERFACE": "0.0.0.0",  # noqa: S104
        "PICKLE_RECEIVER_PORT": "2004",
        "CACHE_QUERY_INTERFACE": "0.0.0.0",  # noqa: S104
        "CACHE_QUERY_PORT": "7002",
        "USE_FLOW_CONTROL": "True",
        "LOG_UPDATES": "False",
        "LOG_CREATES": "True",
        "LOG_LISTENER_CONNECTIONS": "False",
        "CACHE_WRITE_STRATEGY": "sorted",
        "WHISPER_AUTOFLUSH": "False",
        "WHISPER_FALLOCATE_CREATE": "True",
    }
    lines = [f"# {GENERATED_MARK}", "[cache]"] + [f"{k} = {v}" for k, v in cache.items()]
    return "\n".join(lines) + "\n"


def storage_schemas(catalog: Catalog) -> str:
    lines = [
        f"# {GENERATED_MARK}",
        f"# collectd sends every {catalog.interval}s: the finest precision equals that Interval.",
        "# Applies when a whisper file is created; change existing files with whisper-resize.",
    ]
    for name, pattern, retentions in catalog.storage_schemas():
        lines += ["", f"[{name}]", f"pattern = {pattern}", f"retentions = {retentions}"]
    return "\n".join(lines) + "\n"


def storage_aggregation(catalog: Catalog) -> str:
    lines = [f"# {GENERATED_MARK}", "# temperatures keep their peaks, fans their troughs, counters their maxima"]
    for name, pattern, xff, method in catalog.storage_aggregation():
        lines += ["", f"[{name}]", f"pattern = {pattern}", f"xFilesFactor = {xff}", f"aggregationMethod = {method}"]
    return "\n".join(lines) + "\n"


# Grafana provisioning ------------------------------------------------------------------------------
def datasource() -> dict[str, Any]:
    return {
        "apiVersion": 1,
        "datasources": [
            {
                "name": "Graphite",
                "type": "graphite",
                "uid": DATASOURCE_UID,
                "access": "proxy",
                "url": GRAPHITE_URL,
                "isDefault": True,
                "editable": False,
                "jsonData": {"graphiteVersion": "1.1"},
            }
        ],
    }


def dashboard_provider() -> dict[str, Any]:
    return {
        "apiVersion": 1,
        "providers": [
            {
                "name": "homelab",
                "type": "file",
                "folder": FOLDER,
                "disableDeletion": True,
                "allowUiUpdates": False,
                "updateIntervalSeconds": 60,
                "options": {"path": "/var/lib/grafana/dashboards"},
            }
        ],
    }


@dataclass(frozen=True)
class AlertSpec:
    uid: str
    title: str
    target: str
    reducer: str  # reduce over the window: max, min, last
    op: str  # gt | lt
    threshold: float
    for_: str
    summary: str
    no_data: str = "OK"


def alert_specs(plan: Plan, catalog: Catalog) -> list[AlertSpec]:
    thresholds = plan.config.monitoring.thresholds
    cpu_limit = thresholds.cpu_temp_c if thresholds.cpu_temp_c is not None else plan.profile.thresholds.cpu_temp_c
    disk_limit = thresholds.disk_temp_c if thresholds.disk_temp_c is not None else plan.profile.thresholds.disk_temp_c
    specs: list[AlertSpec] = []
    cpu_temps = [s for s in catalog.select(plugin="ipmi", type="temperature") if "processor" in s.type_instance]
    cpu_temps += [s for s in catalog.select(plugin="sensors", type="temperature")]
    if cpu_temps:
        specs.append(
            AlertSpec(
                "cpu-temperature",
                "CPU over temperature",
                max_series(cpu_temps),
                "max",
                "gt",
                cpu_limit,
                "2m",
                f"CPU temperature above {cpu_limit:g} °C",
            )
        )
    disk_temps = catalog.select(plugin="smart", type="smart_temperature")
    if disk_temps:
        specs.append(
            AlertSpec(
                "disk-temperature",
                "Disk over temperature",
                max_series(disk_temps),
                "max",
                "gt",
                disk_limit,
                "5m",
                f"a disk is above {disk_limit:g} °C",
            )
        )
    for sensor in plan.profile.bmc.sensors:
        if sensor.type == "fanspeed" and sensor.min is not None and plan.config.monitoring.ipmi.mode != "off":
            series = catalog.one(plugin="ipmi", type="fanspeed", type_instance=sensor.collectd_name)
            specs.append(
                AlertSpec(
                    f"fan-{_slug(sensor.name)}",
                    f"Fan {sensor.name} stopped",
                    series.path,
                    "min",
                    "lt",
                    sensor.min,
                    "1m",
                    f"{sensor.name} below {sensor.min:g} RPM",
                )
            )
    smart = [s for s in catalog.select(plugin="smart", type="smart_attribute")]
    if smart:
        ids = "/".join(str(i) for i in SMART_FAILURE_ATTRIBUTES)
        specs.append(
            AlertSpec(
                "smart-failure",
                f"SMART {ids} above 0",
                max_series(smart),
                "max",
                "gt",
                0,
                "0s",
                "a disk reports reallocated, pending or uncorrectable sectors or command timeouts",
            )
        )
    pool = pool_used_percent_target(catalog)
    if pool:
        limit = thresholds.pool_used_percent
        specs.append(
            AlertSpec(
                "pool-full",
                f"Pool over {limit:g} %",
                pool,
                "last",
                "gt",
                limit,
                "15m",
                f"the datasets' pool is more than {limit:g} % full",
            )
        )
    heartbeat = catalog.one(plugin="uptime", type="uptime")
    specs.append(
        AlertSpec(
            "no-data",
            "Metrics missing for 5 minutes",
            heartbeat.path,
            "last",
            "lt",
            0,
            "5m",
            "collectd has sent nothing for 5 minutes (collectd, carbon or the host is down)",
            no_data="Alerting",
        )
    )
    return specs


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in text.lower()).strip("-")


def max_series(series: list[Series]) -> str:
    return f"maxSeries({','.join(s.path for s in series)})"


def pool_used_percent_target(catalog: Catalog) -> str | None:
    """Pool fullness from df: what the datasets use over that plus the pool's free space (ZFS reports
    the pool's free space as every dataset's free space)."""
    used = catalog.select(plugin="df", type="df_complex")
    used_paths = [s.path for s in used if s.type_instance == "used"]
    free = [s.path for s in used if s.type_instance == "free"]
    if not used_paths or not free:
        return None
    used_sum = f"sumSeries({','.join(used_paths)})"
    return f"asPercent({used_sum},sumSeries({used_sum},{free[0]}))"


def alert_rules(plan: Plan, catalog: Catalog) -> dict[str, Any]:
    rules = []
    for spec in alert_specs(plan, catalog):
        rules.append(
            {
                "uid": spec.uid,
                "title": spec.title,
                "condition": "C",
                "data": [
                    {
                        "refId": "A",
                        "relativeTimeRange": {"from": 600, "to": 0},
                        "datasourceUid": DATASOURCE_UID,
                        "model": {"refId": "A", "target": spec.target},
                    },
                    {
                        "refId": "B",
                        "datasourceUid": "__expr__",
                        "model": {"refId": "B", "type": "reduce", "expression": "A", "reducer": spec.reducer},
                    },
                    {
                        "refId": "C",
                        "datasourceUid": "__expr__",
                        "model": {
                            "refId": "C",
                            "type": "threshold",
                            "expression": "B",
                            "conditions": [{"evaluator": {"type": spec.op, "params": [spec.threshold]}}],
                        },
                    },
                ],
                "noDataState": spec.no_data,
                "execErrState": "Error",
                "for": spec.for_,
                "annotations": {"summary": spec.summary},
                "labels": {"homelab": "hardware"},
            }
        )
    return {
        "apiVersion": 1,
        "groups": [{"orgId": 1, "name": "homelab", "folder": FOLDER, "interval": "1m", "rules": rules}],
    }


def contact_points(plan: Plan) -> dict[str, Any] | None:
    email = plan.config.monitoring.contact_email
    if not email:
        return None
    return {
        "apiVersion": 1,
        "contactPoints": [
            {
                "orgId": 1,
                "name": "homelab-email",
                "receivers": [{"uid": "homelab-email", "type": "email", "settings": {"addresses": email}}],
            }
        ],
        "policies": [{"orgId": 1, "receiver": "homelab-email", "group_by": ["alertname"]}],
    }


# dashboards ----------------------------------------------------------------------------------------
# Built with the official grafana-foundation-sdk (imported lazily: only rendering needs it). It has no
# Graphite query type; GraphiteQuery below is one (`{"refId", "target"}`, what Grafana's Graphite
# datasource stores).
def _alias(series: Series, label: str | None = None) -> str:
    text = (label or series.label).replace("'", "")
    return f"alias({series.path},'{text}')"


def dashboards(catalog: Catalog) -> dict[str, dict[str, Any]]:
    """file name -> dashboard JSON. Every target names only catalog series (tests check it)."""
    from grafana_foundation_sdk.builders import dashboard, stat, timeseries
    from grafana_foundation_sdk.cog import variants
    from grafana_foundation_sdk.cog.builder import Builder
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.models.dashboard import DataSourceRef

    class GraphiteQuery(variants.Dataquery):
        def __init__(self, ref_id: str, target: str) -> None:
            self.ref_id, self.target = ref_id, target

        def to_json(self) -> dict[str, str]:
            return {"refId": self.ref_id, "target": self.target}

    class GraphiteTarget(Builder[GraphiteQuery]):
        def __init__(self, ref_id: str, target: str) -> None:
            self._query = GraphiteQuery(ref_id, target)

        def build(self) -> GraphiteQuery:
            return self._query

    source = DataSourceRef(type_val="graphite", uid=DATASOURCE_UID)

    def panel(title: str, unit: str, targets: list[str], kind: str = "timeseries", width: int = 12) -> Any:
        builder = (stat.Panel() if kind == "stat" else timeseries.Panel()).title(title).unit(unit)
        builder = builder.datasource(source).height(8).span(width)
        for index, target in enumerate(targets):
            builder = builder.with_target(GraphiteTarget(chr(ord("A") + index), target))
        return builder

    def board(uid: str, title: str, panels: list[Any]) -> dict[str, Any]:
        builder = (
            dashboard.Dashboard(title)
            .uid(uid)
            .tags(["homelab", catalog.host])
            .refresh("1m")
            .time("now-6h", "now")
            .timezone("browser")
        )
        for p in panels:
            builder = builder.with_panel(p)
        built: dict[str, Any] = json.loads(json.dumps(builder.build(), cls=JSONEncoder))
        for number, p in enumerate(built["panels"], start=1):
            p["id"] = number
        return built

    def series_panel(title: str, series: list[Series], kind: str = "timeseries", width: int = 12) -> list[Any]:
        if not series:
            return []
        return [panel(title, series[0].unit, [_alias(s) for s in series], kind, width)]

    c = catalog
    ds_label = {
        "read": "read",
        "write": "write",
        "rx": "in",
        "tx": "out",
        "io_time": "busy",
        "shortterm": "1 min",
        "midterm": "5 min",
        "longterm": "15 min",
    }

    def with_ds(series: list[Series]) -> list[str]:
        return [_alias(s, f"{s.label} {ds_label.get(s.ds or '', s.ds)}") for s in series]

    health: list[Any] = []
    health += series_panel("CPU", [s for s in c.select(plugin="cpu") if s.type_instance != "idle"])
    health += [panel("Load", "short", with_ds(c.select(plugin="load")))]
    health += series_panel("Memory", c.select(plugin="memory"))
    health += series_panel("Uptime", c.select(plugin="uptime"), kind="stat", width=6)
    health += series_panel("Last successful backup", c.select(plugin="backup"), kind="stat", width=6)
    cpu_temp = [
        s
        for s in c.select(kind="temperature")
        if s.plugin in ("ipmi", "sensors") and ("processor" in s.type_instance or s.plugin == "sensors")
    ]
    health += series_panel("CPU temperature", cpu_temp)

    thermals: list[Any] = []
    thermals += series_panel("BMC temperatures", c.select(plugin="ipmi", type="temperature"))
    thermals += series_panel(
        "CPU sensors and thermal zones", c.select(plugin="sensors", kind="temperature") + c.select(plugin="thermal")
    )
    thermals += series_panel("Disk temperatures", c.select(plugin="smart", type="smart_temperature"))
    thermals += series_panel("Fans", c.select(plugin="ipmi", type="fanspeed"))
    thermals += series_panel("Voltages", c.select(plugin="ipmi", type="voltage"))
    thermals += series_panel("Power", c.select(plugin="ipmi", type="power") + c.select(plugin="ipmi", type="current"))

    disks: list[Any] = []
    pool = pool_used_percent_target(c)
    if pool:
        disks.append(panel("Pool used", "percent", [f"alias({pool},'pool used')"], kind="stat", width=6))
    disks += series_panel(
        "Dataset use", [s for s in c.select(plugin="df", type="df_complex") if s.type_instance == "used"], width=18
    )
    disks += [panel("Disk throughput", "Bps", with_ds(c.select(plugin="disk", type="disk_octets")))]
    disks += [panel("Disk operations", "iops", with_ds(c.select(plugin="disk", type="disk_ops")))]
    smart_targets = []
    for disk in sorted({s.plugin_instance for s in c.select(plugin="smart")}):
        attrs = c.select(plugin="smart", plugin_instance=disk, type="smart_attribute")
        if attrs:
            smart_targets.append(f"alias(maxSeries({','.join(s.path for s in attrs)}),'{disk}')")
    if smart_targets:
        disks.append(panel("SMART failure counters (5/187/188/197/198)", "short", smart_targets))
    disks += series_panel("SMART bad sectors", c.select(plugin="smart", type="smart_badsectors"))
    disks += series_panel("ZFS ARC size", c.select(plugin="zfs_arc", type="cache_size"))
    disks += series_panel("ZFS ARC hit ratio", c.select(plugin="zfs_arc", type="cache_ratio"))

    network: list[Any] = []
    network += [panel("Traffic", "Bps", with_ds(c.select(plugin="interface", type="if_octets")))]
    network += [panel("Packets", "pps", with_ds(c.select(plugin="interface", type="if_packets")))]
    network += [panel("Errors", "short", with_ds(c.select(plugin="interface", type="if_errors")))]
    network += series_panel("Edge connections", c.select(plugin="tcpconns"), width=24)

    return {
        "server-health": board("homelab-server-health", "Server health", health),
        "thermals-fans": board("homelab-thermals-fans", "Thermals & fans", thermals),
        "disks-zfs": board("homelab-disks-zfs", "Disks & ZFS", disks),
        "network-edge": board("homelab-network-edge", "Network & edge", network),
    }


def dashboard_targets(boards: dict[str, dict[str, Any]]) -> list[str]:
    return [t["target"] for b in boards.values() for p in b["panels"] for t in p.get("targets", [])]
