"""collectd's files: collectd.conf from the metric catalog, the BMC include (a secret), the backup
status program (the certificate expiry program is a fixed file: homelab/certs/cert-expiry.sh, the
discrete sensors' python plugin another: homelab/collectd_plugins/bmc_states.py, the containers' python plugin
a third: homelab/collectd_plugins/containers.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from homelab.certs.expiry import PROGRAM as CERT_EXPIRY_PROGRAM
from homelab.errors import ConfigError
from homelab.layout import COLLECTD_IPMI_INCLUDE as IPMI_INCLUDE
from homelab.layout import RECOVERY_DRILL
from homelab.monitoring.series import ESCAPE, PREFIX, Catalog
from homelab.plan_model import CARBON_PORT, Plan
from homelab.render.templating import render_template

SOCKET = "/run/collectd.sock"
EXEC_USER = "nobody"
BACKUP_STATUS_PROGRAM = "/usr/local/lib/homelab/backup-status"
PYTHON_MODULE_DIR = "/usr/local/lib/homelab"  # where the collectd image installs bmc_states.py
BMC_STATES_MODULE = Path(__file__).parent.parent / "collectd_plugins" / "bmc_states.py"
CONTAINERS_MODULE = Path(__file__).parent.parent / "collectd_plugins" / "containers.py"
# where the collectd service mounts the host's cgroups and the engine's containers folder (compose/monitoring.yaml)
CGROUP_ROOT = "/host/sys/fs/cgroup"
CONTAINERS_DIR = "/host/var/lib/docker/containers"
PYTHON_PLUGINS = ("python", "containers")  # catalog plugins that are python modules of collectd's python.so


@dataclass(frozen=True)
class StandIn:
    """An exec program that sends series in place of a plugin the machine cannot feed (tests)."""

    program: str
    why: str


def collectd_conf(
    catalog: Catalog,
    *,
    carbon_host: str = "127.0.0.1",
    carbon_port: int = CARBON_PORT,
    socket: str = SOCKET,
    ipmi_include: str = IPMI_INCLUDE,
    python_module_dir: str = PYTHON_MODULE_DIR,
    cgroup_root: str = CGROUP_ROOT,
    containers_dir: str = CONTAINERS_DIR,
    replace: dict[str, StandIn] | None = None,
) -> str:
    """collectd.conf for the catalog. `replace` swaps plugins for exec stand-ins (tests only)."""
    replace = replace or {}
    plugins = [p for p in catalog.plugins if p.name not in replace]
    states = catalog.plugin("python")
    sensors = states.options["sensors"] if states else []
    assert isinstance(sensors, list)
    discrete = [(_collectd_string(name, f"the inventory's sensor {name!r}"), key) for name, key in sensors]
    containers = catalog.plugin("containers")
    services = containers.options["services"] if containers else []
    assert isinstance(services, list)
    named = [[_collectd_string(str(part), f"the service {entry[0]!r}") for part in entry] for entry in services]
    return render_template(
        "collectd.conf.j2",
        host=catalog.host,
        interval=catalog.interval,
        socket=socket,
        plugins=plugins,
        stand_ins=list(replace.values()),
        ipmi_include=ipmi_include,
        python_module_dir=python_module_dir,
        discrete=discrete,
        python_plugins=[p.name for p in plugins if p.name in PYTHON_PLUGINS],
        services=named,
        cgroup_root=cgroup_root,
        containers_dir=containers_dir,
        exec_user=EXEC_USER,
        backup_status_program=BACKUP_STATUS_PROGRAM,
        cert_expiry_program=CERT_EXPIRY_PROGRAM,
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


def dockerfile() -> str:
    return render_template(
        "collectd.Dockerfile.j2",
        exec_user=EXEC_USER,
        cert_expiry_program=CERT_EXPIRY_PROGRAM,
        python_module_dir=PYTHON_MODULE_DIR,
    )


def bmc_states_module() -> str:
    return BMC_STATES_MODULE.read_text(encoding="utf-8")


def containers_module() -> str:
    return CONTAINERS_MODULE.read_text(encoding="utf-8")


def backup_status_script(plan: Plan) -> str:
    return render_template(
        "collectd-backup-status.sh.j2",
        host=plan.config.server.hostname,
        interval=plan.config.monitoring.interval,
        status_dir=plan.config.backup_state_dir,
        recovery_drill=RECOVERY_DRILL,
    )
