"""Grafana alert rules (file provisioning), from the metric selections the dashboards use too.

Written for Grafana's real evaluation (pkg/expr/mathexp/reduce.go, pkg/expr/threshold.go): a Graphite
render ends in a null point while its last bucket is open, and in the default ("strict") reduce mode
`max`/`min` of a window holding a null are NaN, which no threshold crosses. Every reduce here drops
non-numbers (`settings.mode: dropNN`), so the newest complete points decide. A sensor that stops
reporting leaves a window with no number at all: its `count` is 0, which the "silent" rules catch;
a series that does not exist at all is NoData, which `noDataState` maps deliberately per rule.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any, Literal

from homelab.certs.expiry import ALERT_DAYS
from homelab.monitoring import selections as pick
from homelab.monitoring import states
from homelab.monitoring.series import SMART_FAILURE_ATTRIBUTES, Catalog, Series
from homelab.monitoring.watch import FAN_FLOOR, SILENT_WINDOW, UNIT_TEXT, Watch, shown
from homelab.plan_model import Plan
from homelab.render.grafana import DATASOURCE_UID, FOLDER

NoDataState = Literal["OK", "Alerting", "NoData"]
Reducer = Literal["max", "min", "last", "count", "sum"]
Op = Literal["gt", "lt", "outside_range"]
REDUCE_MODE = "dropNN"
WINDOW = 600  # seconds of data each rule looks at
RESTARTS = 3  # restarts of one service within RESTART_WINDOW that mean it is crash-looping
RESTART_WINDOW = 900
BASELINE = "1d"  # the median a rise or drift is measured from


@dataclass(frozen=True)
class AlertSpec:
    uid: str
    title: str
    target: str
    reducer: Reducer
    op: Op
    threshold: float
    for_: str
    summary: str
    no_data: NoDataState = "OK"
    window: int = WINDOW
    area: Literal["hardware", "containers", "backups"] = "hardware"  # the rule's `homelab` label
    upper: float | None = None  # outside_range: the range's upper end (`threshold` its lower)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def silent(rule_uid: str, what: str, series: Series) -> AlertSpec:
    """Fires when `series` sent no number for SILENT_WINDOW, or does not exist."""
    return AlertSpec(
        rule_uid, f"{what} silent", series.path, "count", "lt", 1, "0s",
        f"{what} has reported nothing for {SILENT_WINDOW // 60} minutes", "Alerting", SILENT_WINDOW,
    )  # fmt: skip


def _cpu_specs(plan: Plan, catalog: Catalog) -> list[AlertSpec]:
    temps = pick.cpu_temperatures(catalog)
    if not temps:
        return []
    configured = plan.config.monitoring.thresholds.cpu_temp_c
    limit = configured if configured is not None else plan.profile.thresholds.cpu_temp_c
    specs = [
        AlertSpec(
            "cpu-temperature", "CPU over temperature", pick.max_series(temps), "max", "gt", limit, "2m",
            f"CPU temperature above {limit:g} °C", "Alerting",
        )
    ]  # fmt: skip
    # the BMC's CPU sensors get their silent rules with their own limits (_sensor_specs)
    return specs + [silent(uid("silent", s.plugin_instance, s.type_instance), s.label, s) for s in temps if not s.cpu]


def uid(*parts: str) -> str:
    """A rule uid (Grafana allows 40 characters): the parts' slugs, shortened with a hash if needed."""
    text = "-".join(_slug(p) for p in parts)
    return text if len(text) <= 40 else f"{text[:31]}-{hashlib.sha256(text.encode()).hexdigest()[:8]}"


def _sensor_specs(series: Series, fan_floor: float) -> list[AlertSpec]:
    """A BMC sensor's rules (homelab/monitoring/watch.py decides which): below its lower limit (fans:
    `fan_floor` RPM where the inventory has none), above its upper limit, risen above or drifted off
    its median of the last day, silent. Fans and CPU temperatures also alert when they vanish."""
    watch, unit = series.watch or Watch(silent=False), UNIT_TEXT.get(series.kind, "")
    watched = series.kind in ("fanspeed", "percent") or series.cpu
    no_data: NoDataState = "Alerting" if watched else "OK"
    low = fan_floor if watch.fan_floor else watch.low
    low_source = FAN_FLOOR if watch.fan_floor else watch.low_source
    sides: tuple[tuple[str, float | None, Reducer, Op, str, str, str], ...] = (
        ("low", low, "min", "lt", "below", "1m", low_source),
        ("high", watch.high, "max", "gt", "above", "2m", watch.high_source),
    )
    specs = [
        AlertSpec(
            uid(series.type, series.type_instance, side), f"{series.label} {word} {limit:g}{unit}", series.target,
            reducer, op, limit, wait, f"{series.label} {word} {limit:g}{unit} ({shown(source)})", no_data,
        )
        for side, limit, reducer, op, word, wait, source in sides
        if limit is not None
    ]  # fmt: skip
    specs += _baseline_specs(series, watch, unit)
    if watch.silent:
        specs.append(silent(uid("silent", series.type, series.type_instance), series.label, series))
    return specs


def _baseline_specs(series: Series, watch: Watch, unit: str) -> list[AlertSpec]:
    """Risen above (or, for a rail, drifted off) its median of the last day for the whole window. The
    median is graphite-web's movingMedian over a day before each point: a sensor younger than a day is
    compared with what it has."""
    median = f"movingMedian({series.target},'{BASELINE}')"
    found = []
    if watch.rise is not None:
        target = f"diffSeries({series.target},{median})"
        word, value = "above its day median", watch.rise
    elif watch.drift is not None:
        target = f"absolute(diffSeries({series.target},{median}))"
        word, value = "off its day median", watch.drift
    else:
        return []
    found.append(
        AlertSpec(
            uid(series.type, series.type_instance, "baseline"), f"{series.label} {value:g}{unit} {word}", target,
            "min", "gt", value, "5m",
            f"{series.label} has been {value:g}{unit} or more {word} for {WINDOW // 60} minutes "
            f"({shown(watch.baseline_source)})",
        )
    )  # fmt: skip
    return found


def _state_specs(catalog: Catalog) -> list[AlertSpec]:
    """A discrete sensor whose states are no longer those of discovery (a supply lost, a fan pulled, the
    chassis opened); the summary names the states of discovery and each one-bit change in words."""
    specs = []
    for series in pick.bmc_states(catalog):
        if series.states is None:
            continue
        type_ = series.state_type or "unknown"
        seen = states.words(series.states, type_)
        meanings = "; ".join(f"{value}: {text}" for value, text in states.changes(series.states, type_))
        specs.append(
            AlertSpec(
                uid("state", series.type_instance), f"{series.label} changed state", series.path, "last",
                "outside_range", series.states - 0.5, "0s",
                f"{series.label} left its state at discovery ({series.states}: {seen}); now {{{{ $values.B.Value }}}}"
                f" (IPMI {type_}: {meanings})", upper=series.states + 0.5,
            )
        )  # fmt: skip
        if series.watch and series.watch.silent:
            specs.append(silent(uid("silent", "state", series.type_instance), series.label, series))
    return specs


def _sel_specs(catalog: Catalog) -> list[AlertSpec]:
    """Any new critical SEL entry (homelab's plugin counts them per read), at once: the entry itself is in
    the BMC's log. No data is OK: the silent rules of the sensors read through the same plugin cover it."""
    critical = pick.sel_critical(catalog)
    if critical is None:
        return []
    return [
        AlertSpec(
            "sel-critical", "New critical SEL entry", critical.path, "max", "gt", 0, "0s",
            "the BMC logged a critical event (a failure, an uncorrectable error, a critical limit crossed, "
            "power or redundancy lost, an intrusion): `ipmitool sel elist` shows it",
        )
    ]  # fmt: skip


def _bmc_specs(plan: Plan, catalog: Catalog) -> list[AlertSpec]:
    if plan.config.monitoring.ipmi.mode == "off":
        return []
    floor = plan.config.monitoring.thresholds.fan_min_rpm
    sensors = [spec for series in catalog.select(plugin="ipmi") for spec in _sensor_specs(series, floor)]
    return sensors + _state_specs(catalog) + _sel_specs(catalog)


def _disk_specs(plan: Plan, catalog: Catalog) -> list[AlertSpec]:
    specs: list[AlertSpec] = []
    configured = plan.config.monitoring.thresholds.disk_temp_c
    limit = configured if configured is not None else plan.profile.thresholds.disk_temp_c
    temps = pick.disk_temperatures(catalog)
    if temps:
        specs.append(
            AlertSpec(
                "disk-temperature", "Disk over temperature", pick.max_series(temps), "max", "gt", limit, "5m",
                f"a disk is above {limit:g} °C",
            )
        )  # fmt: skip
    smart = pick.smart_failure_counters(catalog)
    if smart:
        ids = "/".join(str(i) for i in SMART_FAILURE_ATTRIBUTES)
        specs.append(
            AlertSpec(
                "smart-failure", f"SMART {ids} above 0", pick.max_series(smart), "max", "gt", 0, "0s",
                "a disk reports reallocated, pending or uncorrectable sectors or command timeouts",
            )
        )  # fmt: skip
    pool = pick.pool_used_percent_target(catalog)
    if pool:
        full = plan.config.monitoring.thresholds.pool_used_percent
        specs.append(
            AlertSpec(
                "pool-full", f"Pool over {full:g} %", pool, "last", "gt", full, "15m",
                f"the datasets' pool is more than {full:g} % full",
            )
        )  # fmt: skip
    return specs


def _certificate_specs(catalog: Catalog) -> list[AlertSpec]:
    """Per served name: under ALERT_DAYS left, or no number at all (never fetched: NoData; stopped
    answering: the silent rule), since a name the edge cannot serve is as bad as an expired one."""
    limit = ALERT_DAYS
    specs: list[AlertSpec] = []
    for series in pick.certificate_days_left(catalog):
        name = series.plugin_instance
        specs += [
            AlertSpec(
                uid("cert-expiry", name), f"Certificate for {name} expires in under {limit} days", series.path,
                "min", "lt", limit, "0s",
                f"the certificate served for {name} expires in under {limit} days (renewal has failed), "
                "or it cannot be fetched", "Alerting",
            ),
            silent(uid("silent-cert", name), f"Certificate check for {name}", series),
        ]  # fmt: skip
    return specs


def _container_specs(catalog: Catalog) -> list[AlertSpec]:
    """Per service: any OOM kill, and RESTARTS restarts or more within RESTART_WINDOW. Both look at the
    counters' increase, so a counter that starts again from 0 never fires; no data is OK (a service
    that is down is the health gate's and `status`'s to show)."""
    minutes = RESTART_WINDOW // 60
    specs: list[AlertSpec] = []
    for series in pick.container_oom_kills(catalog):
        name = series.label.removesuffix(" OOM kills")
        specs.append(
            AlertSpec(
                uid("oom", series.plugin_instance), f"{name} OOM-killed", pick.increase(series), "max", "gt", 0,
                "0s", f"the kernel's OOM killer killed a process of {name} at its memory limit",
                area="containers",
            )
        )  # fmt: skip
    for series in pick.container_restarts(catalog):
        name = series.label.removesuffix(" restarts")
        specs.append(
            AlertSpec(
                uid("restarts", series.plugin_instance), f"{name} restarting repeatedly", pick.increase(series),
                "sum", "gt", RESTARTS - 1, "0s",
                f"{name} restarted {RESTARTS} times or more within {minutes} minutes", window=RESTART_WINDOW,
                area="containers",
            )
        )  # fmt: skip
    return specs


def _recovery_drill_specs(plan: Plan, catalog: Catalog) -> list[AlertSpec]:
    """The last good `backup drill --recover` older than backup.recovery_drill_days, or the last one failed.
    No data (no drill yet) is OK: the first drill starts the clock, and `backup status` says "never"."""
    days = plan.config.backup.recovery_drill_days if plan.config.backup else 0
    specs = [
        AlertSpec(
            uid("recovery-drill-age"),
            f"Recovery drill older than {days} days",
            series.path,
            "min",
            "gt",
            days,
            "0s",
            f"no `homelab backup drill --recover` has succeeded for more than {days} days",
            area="backups",
        )
        for series in pick.recovery_drill(catalog, "age_days")
    ]
    specs += [
        AlertSpec(
            uid("recovery-drill-failed"), "Recovery drill failed", series.path, "max", "gt", 0, "0s",
            "the last `homelab backup drill --recover` failed: `homelab backup status` says why", area="backups",
        )
        for series in pick.recovery_drill(catalog, "failed")
    ]  # fmt: skip
    return specs


def alert_specs(plan: Plan, catalog: Catalog) -> list[AlertSpec]:
    heartbeat = AlertSpec(
        "no-data", "Metrics missing for 5 minutes", pick.heartbeat(catalog).path, "count", "lt", 1, "0s",
        "collectd has sent nothing for 5 minutes (collectd, carbon or the host is down)", "Alerting", SILENT_WINDOW,
    )  # fmt: skip
    hardware = _cpu_specs(plan, catalog) + _disk_specs(plan, catalog) + _bmc_specs(plan, catalog)
    backups = _recovery_drill_specs(plan, catalog)
    return hardware + _certificate_specs(catalog) + _container_specs(catalog) + backups + [heartbeat]


def _params(spec: AlertSpec) -> list[float]:
    return [spec.threshold] if spec.upper is None else [spec.threshold, spec.upper]


def rule(spec: AlertSpec) -> dict[str, Any]:
    return {
        "uid": spec.uid,
        "title": spec.title,
        "condition": "C",
        "data": [
            {
                "refId": "A",
                "relativeTimeRange": {"from": spec.window, "to": 0},
                "datasourceUid": DATASOURCE_UID,
                "model": {"refId": "A", "target": spec.target},
            },
            {
                "refId": "B",
                "datasourceUid": "__expr__",
                "model": {
                    "refId": "B",
                    "type": "reduce",
                    "expression": "A",
                    "reducer": spec.reducer,
                    "settings": {"mode": REDUCE_MODE},
                },
            },
            {
                "refId": "C",
                "datasourceUid": "__expr__",
                "model": {
                    "refId": "C",
                    "type": "threshold",
                    "expression": "B",
                    "conditions": [{"evaluator": {"type": spec.op, "params": _params(spec)}}],
                },
            },
        ],
        "noDataState": spec.no_data,
        "execErrState": "Error",
        "for": spec.for_,
        "annotations": {"summary": spec.summary},
        "labels": {"homelab": spec.area},
    }


def alert_rules(plan: Plan, catalog: Catalog) -> dict[str, Any]:
    rules = [rule(spec) for spec in alert_specs(plan, catalog)]
    return {
        "apiVersion": 1,
        "groups": [{"orgId": 1, "name": "homelab", "folder": FOLDER, "interval": "1m", "rules": rules}],
    }
