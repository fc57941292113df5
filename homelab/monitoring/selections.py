"""One definition of each metric selection: the dashboards' panels and the alert rules both ask here,
so a panel and the alert about the same thing can never look at different series."""

from __future__ import annotations

from homelab.certs.expiry import PLUGIN as CERT_PLUGIN
from homelab.certs.expiry import TYPE as CERT_TYPE
from homelab.layout import RECOVERY_DRILL
from homelab.monitoring.plugins import CONTAINER_PLUGIN, SEL_PLUGIN, STATE_PLUGIN
from homelab.monitoring.series import Catalog, Series


def cpu_temperatures(catalog: Catalog) -> list[Series]:
    """The BMC's processor temperatures and the host's coretemp sensors."""
    bmc = [s for s in catalog.select(plugin="ipmi", type="temperature") if s.cpu]
    return bmc + catalog.select(plugin="sensors", type="temperature")


def bmc(catalog: Catalog, type_: str) -> list[Series]:
    return catalog.select(plugin="ipmi", type=type_)


def bmc_states(catalog: Catalog) -> list[Series]:
    """The BMC's discrete sensors: their asserted states (homelab's bmc_states plugin)."""

    return catalog.select(plugin=STATE_PLUGIN)


def sel_counts(catalog: Catalog) -> list[Series]:
    """The BMC's new System Event Log entries per read, all and critical ones (homelab's bmc_states plugin)."""

    return catalog.select(plugin=SEL_PLUGIN)


def sel_critical(catalog: Catalog) -> Series | None:
    return next((s for s in sel_counts(catalog) if s.type_instance == "critical"), None)


def fans(catalog: Catalog) -> list[Series]:
    """The BMC's fans: in RPM (type fanspeed) or, on HPE iLO and the like, in percent of full speed."""
    return [s for s in catalog.select(plugin="ipmi") if s.type in ("fanspeed", "percent")]


def disk_temperatures(catalog: Catalog) -> list[Series]:
    return catalog.select(plugin="smart", type="smart_temperature")


def smart_failure_counters(catalog: Catalog, disk: str | None = None) -> list[Series]:
    return catalog.select(plugin="smart", type="smart_attribute", plugin_instance=disk)


def dataset_used(catalog: Catalog) -> list[Series]:
    return [s for s in catalog.select(plugin="df", type="df_complex") if s.type_instance == "used"]


def certificate_days_left(catalog: Catalog) -> list[Series]:
    """Days until each served name's certificate expires, as the edge serves it."""
    return catalog.select(plugin=CERT_PLUGIN, type=CERT_TYPE)


def recovery_drill(catalog: Catalog, type_instance: str) -> list[Series]:
    """`backup drill --recover`'s `age_days` (since the last good one) or `failed` (the last one)."""
    found = catalog.select(plugin="backup", plugin_instance=RECOVERY_DRILL)
    return [s for s in found if s.type_instance == type_instance]


def heartbeat(catalog: Catalog) -> Series:
    return catalog.one(plugin="uptime", type="uptime")


def max_series(series: list[Series]) -> str:
    return f"maxSeries({','.join(s.target for s in series)})"


def pool_used_percent_target(catalog: Catalog) -> str | None:
    """Pool fullness from df: what the datasets use over that plus the pool's free space (ZFS reports
    the pool's free space as every dataset's free space)."""
    used_paths = [s.path for s in dataset_used(catalog)]
    free = [s.path for s in catalog.select(plugin="df", type="df_complex") if s.type_instance == "free"]
    if not used_paths or not free:
        return None
    used_sum = f"sumSeries({','.join(used_paths)})"
    return f"asPercent({used_sum},sumSeries({used_sum},{free[0]}))"


def container_memory(catalog: Catalog) -> list[Series]:
    """Each service's containers: memory in use and their limit (homelab's containers plugin)."""
    return catalog.select(plugin=CONTAINER_PLUGIN, type="memory")


def container_cpu(catalog: Catalog) -> list[Series]:
    return catalog.select(plugin=CONTAINER_PLUGIN, type="percent")


def container_oom_kills(catalog: Catalog) -> list[Series]:
    """OOM kills counted since collectd started, per service."""
    return [s for s in catalog.select(plugin=CONTAINER_PLUGIN, type="count") if s.type_instance == "oom_kills"]


def container_restarts(catalog: Catalog) -> list[Series]:
    """The engine's restart count of each service's containers."""
    return [s for s in catalog.select(plugin=CONTAINER_PLUGIN, type="count") if s.type_instance == "restarts"]


def increase(series: Series) -> str:
    """The increase of a counter at each point; a counter that starts again from 0 (collectd restarted,
    the container recreated) gives no point there rather than a negative one."""
    return f"nonNegativeDerivative({series.path})"
