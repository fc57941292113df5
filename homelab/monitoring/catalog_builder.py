"""Builds the metric catalog (homelab/monitoring/series.py): the collectd plugins and the series each sends,
one group of plugins per method."""

from __future__ import annotations

from dataclasses import dataclass, field

from homelab.certs.expiry import PLUGIN as CERT_PLUGIN
from homelab.certs.expiry import TYPE as CERT_TYPE
from homelab.certs.expiry import TYPE_INSTANCE as CERT_TYPE_INSTANCE
from homelab.config.models import Config
from homelab.layout import RECOVERY_DRILL, project_name
from homelab.monitoring.inventory import Inventory, smart_disks, watched_disks
from homelab.monitoring.plugins import CONTAINER_PLUGIN, SEL_PLUGIN, STATE_PLUGIN
from homelab.monitoring.series import (
    CPU_STATES,
    MEMORY_STATES,
    MULTI_DS,
    SMART_FAILURE_ATTRIBUTES,
    TCP_STATES,
    Catalog,
    Kind,
    Plugin,
    Series,
    df_instance,
    retentions,
)
from homelab.monitoring.watch import Watch
from homelab.plan_model import Plan
from homelab.profiles import Profile


@dataclass
class Builder:
    """Collects the plugins and series of a catalog, one group of plugins per method."""

    config: Config
    profile: Profile
    inventory: Inventory | None
    plugins: list[Plugin] = field(default_factory=list)
    series: list[Series] = field(default_factory=list)

    def add(self, plugin: str, pinst: str, type_: str, tinst: str, kind: Kind, label: str) -> None:
        host = self.config.server.hostname
        for ds in MULTI_DS.get(type_, (None,)):
            self.series.append(Series(host, plugin, pinst, type_, tinst, ds, kind, label))

    def bmc(self) -> None:
        """The BMC over IPMI: the inventory's sensors when there is one, else the profile's."""
        from homelab.monitoring import bmc

        mode, inventory = self.config.monitoring.ipmi.mode, self.inventory
        if mode == "off":
            return
        configured = self.config.monitoring.thresholds.disk_temp_c
        disk_c = configured if configured is not None else self.profile.thresholds.disk_temp_c
        found = bmc.from_inventory(inventory, disk_c) if inventory and inventory.bmc else bmc.from_profile(self.profile)
        renames = bmc.rename_rules(inventory) if inventory and inventory.bmc else []
        self.plugins.append(Plugin("ipmi", {"mode": mode, "instance": "bmc", "renames": renames}, needs_hardware=True))
        host = self.config.server.hostname
        for b in found:
            self.series.append(
                Series(
                    host,
                    "ipmi",
                    "",
                    b.type,
                    b.type_instance,
                    None,
                    b.kind,
                    b.label,
                    b.cpu,
                    b.limits,
                    watch=b.watch,
                    fahrenheit=b.fahrenheit,
                )
            )
        if inventory and inventory.bmc:
            # collectd's ipmi plugin skips discrete sensors and the SEL: homelab's python plugin reads them
            discrete = inventory.discrete()
            options: dict[str, object] = {
                "mode": mode,
                "cipher_suite": self.config.monitoring.ipmi.cipher_suite,
                "sensors": [(e.name, e.key) for e in discrete],
                "sel": True,
            }
            self.plugins.append(Plugin("python", options, needs_hardware=True))
            self.add(SEL_PLUGIN, "", "count", "new", "count", "new SEL entries")
            self.add(SEL_PLUGIN, "", "count", "critical", "count", "new critical SEL entries")
            for e in discrete:
                self.series.append(
                    Series(
                        host,
                        STATE_PLUGIN,
                        "",
                        "gauge",
                        e.key,
                        None,
                        "state",
                        e.shown,
                        states=e.states,
                        state_type=e.sensor_type or "unknown",
                        watch=Watch(silent=e.silent),
                    )
                )

    def host_sensors(self) -> None:
        """lm-sensors (the inventory's, else the profile's) and ACPI thermal zones."""
        inventory, profile = self.inventory, self.profile
        hwmon = [h for h in inventory.hwmon if not h.hide] if inventory and inventory.hwmon else profile.lm_sensors
        if hwmon:
            features = [f"{s.chip}/{s.type}-{s.feature}" for s in hwmon]
            self.plugins.append(Plugin("sensors", {"sensors": features}, needs_hardware=True))
            for s in hwmon:
                self.add("sensors", s.chip, s.type, s.feature, s.type, s.label)
        if profile.thermal_zones:
            self.plugins.append(Plugin("thermal", {"devices": list(profile.thermal_zones)}, needs_hardware=True))
            for zone in profile.thermal_zones:
                self.add("thermal", zone, "temperature", "", "temperature", zone)

    def disks(self) -> None:
        """SMART health and temperature, I/O."""
        inventory = self.inventory
        disks = watched_disks(self.config.monitoring.disks, inventory, self.profile.disks)
        smart = smart_disks(self.config.monitoring.disks, inventory, self.profile.disks)
        if smart:  # with no Disk line at all collectd's smart plugin would read every disk
            self.plugins.append(Plugin("smart", {"disks": smart}, needs_hardware=True))
        host = self.config.server.hostname
        for disk in smart:
            self.add("smart", disk, "smart_temperature", "", "temperature", f"{disk} temperature")
            self.add("smart", disk, "smart_badsectors", "", "count", f"{disk} bad sectors")
            for attr_id, name in SMART_FAILURE_ATTRIBUTES.items():
                label = f"{disk} SMART {attr_id} {name}"
                self.series.append(Series(host, "smart", disk, "smart_attribute", name, "pretty", "count", label))
        self.plugins.append(Plugin("disk", {"disks": disks}, needs_hardware=True))
        for disk in disks:
            self.add("disk", disk, "disk_octets", "", "bytes_rate", f"{disk} throughput")
            self.add("disk", disk, "disk_ops", "", "ops_rate", f"{disk} operations")
            self.add("disk", disk, "disk_io_time", "", "seconds", f"{disk} busy time")

    def storage(self, dataset_paths: list[str]) -> None:
        """Filesystem use per dataset mountpoint, the ZFS ARC."""
        mounts = sorted(set(dataset_paths))
        if mounts:
            self.plugins.append(Plugin("df", {"mountpoints": mounts}, needs_hardware=True))
            for mount in mounts:
                inst = df_instance(mount)
                for state in ("used", "free"):
                    self.add("df", inst, "df_complex", state, "bytes", f"{mount} {state}")
                self.add("df", inst, "percent_bytes", "used", "percent", f"{mount} used")
        self.plugins.append(Plugin("zfs_arc", needs_hardware=True))
        self.add("zfs_arc", "", "cache_size", "arc", "bytes", "ARC size")
        self.add("zfs_arc", "", "cache_size", "c", "bytes", "ARC target size")
        self.add("zfs_arc", "", "cache_ratio", "arc", "ratio", "ARC hit ratio")
        for result in ("hit", "miss"):
            self.add("zfs_arc", "", "cache_result", f"demand_data-{result}", "ops_rate", f"demand data {result}s")

    def system(self) -> None:
        """CPU, memory, load, network, uptime."""
        self.plugins.append(Plugin("cpu"))
        for state in CPU_STATES:
            self.add("cpu", "", "percent", state, "percent", f"CPU {state}")
        self.plugins.append(Plugin("memory"))
        for state in MEMORY_STATES:
            self.add("memory", "", "memory", state, "bytes", f"memory {state}")
        self.plugins.append(Plugin("load"))
        self.add("load", "", "load", "", "load", "load")
        nics = (self.inventory.nics if self.inventory else None) or [self.profile.network_interface]
        self.plugins.append(Plugin("interface", {"interfaces": nics}, needs_hardware=True))
        for iface in nics:
            self.add("interface", iface, "if_octets", "", "bytes_rate", f"{iface} traffic")
            self.add("interface", iface, "if_packets", "", "packets_rate", f"{iface} packets")
            self.add("interface", iface, "if_errors", "", "errors_rate", f"{iface} errors")

    def edge_and_backup(self, served_names: list[str], cert_args: list[str]) -> None:
        """The edge's connections (host network: collectd sees the published ports), the heartbeat, and
        two exec programs (never run as root): the backup job's record, and the days left on the
        certificate the edge serves for each name (`cert_args`, homelab/certs/expiry.py)."""
        config = self.config
        ports = [config.edge.https_port, config.edge.http_port]
        self.plugins.append(Plugin("tcpconns", {"ports": ports}))
        for port in ports:
            for state in TCP_STATES:
                self.add("tcpconns", f"{port}-local", "tcp_connections", state, "connections", f":{port} {state}")
        self.plugins.append(Plugin("uptime"))
        self.add("uptime", "", "uptime", "", "seconds", "uptime")
        remotes = sorted(config.backup.remotes) if config.backup is not None and config.backup.enabled else []
        for remote in remotes:
            self.add("backup", remote, "timestamp", "last_success", "timestamp", f"backup {remote} last success")
        if remotes:  # `backup drill --recover` (homelab.backup.recovery_drill): the age of the last good one
            self.add("backup", RECOVERY_DRILL, "gauge", "age_days", "days", "recovery drill: days since the last good")
            self.add("backup", RECOVERY_DRILL, "count", "failed", "count", "recovery drill: the last one failed")
        for name in served_names:
            self.add(CERT_PLUGIN, name, CERT_TYPE, CERT_TYPE_INSTANCE, "days", f"{name} certificate")
        if remotes or cert_args:
            drill = [RECOVERY_DRILL] if remotes else []
            self.plugins.append(Plugin("exec", {"backup_remotes": remotes + drill, "cert_expiry": cert_args}))

    def containers(self, services: list[tuple[str, str]]) -> None:
        """Each service's containers (homelab's containers python plugin): memory in use and its limit,
        CPU, OOM kills and restarts. Named `<stack>-<service>`, whichever container runs it."""
        if not services:
            return
        listed = [(f"{stack}-{service}", project_name(stack), service) for stack, service in services]
        self.plugins.append(Plugin("containers", {"services": listed}, needs_hardware=True))
        for (stack, service), (key, _project, _service) in zip(services, listed, strict=True):
            label = f"{stack}/{service}"
            self.add(CONTAINER_PLUGIN, key, "memory", "used", "bytes", f"{label} memory")
            self.add(CONTAINER_PLUGIN, key, "memory", "limit", "bytes", f"{label} limit")
            self.add(CONTAINER_PLUGIN, key, "percent", "cpu", "percent", f"{label} CPU")
            self.add(CONTAINER_PLUGIN, key, "count", "oom_kills", "count", f"{label} OOM kills")
            self.add(CONTAINER_PLUGIN, key, "count", "restarts", "count", f"{label} restarts")


def build_catalog(
    config: Config,
    profile: Profile,
    dataset_paths: list[str] | None = None,
    inventory: Inventory | None = None,
    cert_expiry: tuple[list[str], list[str]] = ([], []),
    services: list[tuple[str, str]] | None = None,
) -> Catalog:
    """Every plugin and series for this server. `dataset_paths`: mountpoints to watch with df. The BMC's
    sensors come from the inventory when there is one, else from the profile. `cert_expiry`: the served
    names and the certificate expiry program's arguments (homelab/certs/expiry.py). `services`: the
    (stack, service) pairs whose containers get memory, CPU, OOM kill and restart series."""
    builder = Builder(config, profile, inventory)
    builder.bmc()
    builder.host_sensors()
    builder.disks()
    builder.storage(dataset_paths or [])
    builder.system()
    builder.edge_and_backup(*cert_expiry)
    builder.containers(services or [])
    interval = config.monitoring.interval
    return Catalog(
        config.server.hostname, interval, tuple(builder.plugins), tuple(builder.series), retentions(interval)
    )


def catalog_for(plan: Plan) -> Catalog:
    """The catalog of a plan: df watches every dataset's mountpoint, the expiry program every served name,
    the containers plugin every service."""
    from homelab.certs.expiry import exec_args, served_names

    certs = (served_names(plan), exec_args(plan))
    services = [(stack.name, name) for stack in plan.stacks.values() for name in stack.services]
    datasets = [d.path for d in plan.datasets]
    return build_catalog(plan.config, plan.profile, datasets, plan.inventory, certs, services)
