"""Real daemons on loopback for the monitoring end-to-end test and bench/monitoring.py.

- `Bmc`: OpenIPMI's `ipmi_sim` over LAN (RMCP+) with the hardware profile's BMC sensors: the SDRs
  are written in sdrcomp's text format from the profile and compiled with `sdrcomp`; each sensor's
  value is polled by ipmi_sim from a file (`Bmc.set("CPU Temp", 91)`).
- `stand_ins`: real collectd exec programs for plugins whose hardware this machine lacks; each one
  PUTVALs exactly the catalog's series of the plugin it replaces.
- `Carbon`: carbon-cache with the rendered carbon.conf/storage-schemas/storage-aggregation, its
  paths moved under a temp dir and its ports on free loopback ports.
- `GraphiteWeb`: graphite-web (PyPI)'s WSGI app on a threaded wsgiref server on 127.0.0.1, reading
  carbon's whisper files and its cache (CARBONLINK_HOSTS).
- `Collectd`: collectd -f with a given config, in its own process group (exec children included).

Every process runs in its own session and is killed as a group; every wait is bounded.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from homelab.monitoring.series import Catalog, Series
from homelab.profiles import BmcSensor, Profile
from homelab.render.collectd import StandIn

BMC_USER = "monitor"
BMC_PASSWORD = "s3cret"
IPMI_PORT = 623  # collectd's ipmi plugin cannot take another port
TYPES_DB = Path("/usr/share/collectd/types.db")
VENV_BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(predicate: Callable[[], Any], timeout: float, what: str, step: float = 0.2) -> Any:
    """Poll until `predicate()` is truthy; fail with `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} (waited {timeout:g}s)")
        time.sleep(step)


class Process:
    """A daemon in its own session (process group), output to a log file."""

    def __init__(
        self,
        name: str,
        argv: list[str],
        log: Path,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.name, self.argv, self.log_path = name, argv, log
        self._log = log.open("ab")
        self.popen = subprocess.Popen(
            argv,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def check_alive(self) -> None:
        if not self.alive():
            raise RuntimeError(f"{self.name} exited with {self.popen.returncode}:\n{self.log()[-3000:]}")

    def stop(self, grace: float = 10) -> None:
        """SIGTERM the group, then SIGKILL whatever is left of it (exec children included)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=grace)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=5)
        self._log.close()


# BMC: ipmi_sim --------------------------------------------------------------------------------------
# collectd type -> (sdrcomp sensor_type, IPMI sensor type code, sdrcomp base_unit)
SENSOR_KINDS = {
    "temperature": ("Temperature", 0x01, "degrees_C"),
    "voltage": ("Voltage", 0x02, "Volts"),
    "current": ("Current", 0x03, "Amps"),
    "fanspeed": ("Fan", 0x04, "RPM"),
    "power": ("Current", 0x03, "Watts"),
}


@dataclass(frozen=True)
class SimSensor:
    number: int
    sensor: BmcSensor
    m: int  # value = m * raw * 10^r_exp (linear, b = 0)
    r_exp: int

    @staticmethod
    def scaled(number: int, sensor: BmcSensor) -> SimSensor:
        if sensor.type == "temperature":
            return SimSensor(number, sensor, 1, 0)
        if sensor.type == "fanspeed":
            return SimSensor(number, sensor, 25, 0)  # up to 6375 RPM
        top = max(v for v in (sensor.max, sensor.crit, sensor.warn, sensor.min, 1.0) if v is not None) * 1.3
        return SimSensor(number, sensor, max(1, math.ceil(top / 255 * 100)), -2)

    def raw(self, value: float) -> int:
        return max(0, min(255, round(value / (self.m * 10**self.r_exp))))

    def value(self, raw: int) -> float:
        return raw * self.m * 10**self.r_exp

    def nominal(self) -> float:
        s = self.sensor
        if s.type == "temperature":
            return 42.0 if s.entity == "processor" else 34.0
        if s.type == "fanspeed":
            return 1200.0
        if s.min is not None and s.max is not None:
            return (s.min + s.max) / 2
        return 1.0

    def sdr_text(self) -> str:
        sensor_type, _code, unit = SENSOR_KINDS[self.sensor.type]
        return "\n".join(
            [
                f"# {self.sensor.name} ({self.sensor.type})",
                "sdr type 1",
                "\tsensor_owner_id\t\t0x20",
                "\tsensor_owner_lun\t0",
                "\tchannel_number\t\t0",
                f"\tsensor_number\t\t{self.number}",
                f"\tentity_id\t\t{self.sensor.ipmi_entity_id}",
                f"\tentity_instance\t\t{self.sensor.entity_instance}",
                "\tinit_scanning\t\ttrue",
                "\tinit_sensor_type\ttrue",
                "\tdefault_sensor_scan_on\ttrue",
                f"\tsensor_type\t\t{sensor_type}",
                "\tevent_reading_type_code\t1",
                "\tanalog_data_format\tunsigned",
                "\trate_unit\t\tnone",
                "\tmodifier_unit\t\tnone",
                "\tpercentage\t\tfalse",
                f"\tbase_unit\t\t{unit}",
                "\tmodifier_unit_code\tunspecified",
                "\tlinearization\t\tlinear",
                f"\tm\t\t\t{self.m}",
                "\ttolerance\t\t0",
                "\tb\t\t\t0",
                "\taccuracy\t\t1",
                "\taccuracy_exp\t\t0",
                "\tsensor_direction\tinput",
                f"\tr_exp\t\t\t{self.r_exp}",
                "\tb_exp\t\t\t0",
                "\tsensor_maximum\t\t255",
                "\tsensor_minimum\t\t0",
                f'\tid_string\t\t"{self.sensor.name}"',
                "endsdr",
                "",
            ]
        )


def docs_img(setting: str) -> Path:
    """Where HOMELAB_E2E_DOCS_IMG points; a relative path is taken from the checkout (each test runs in
    its own tmp_path: tests/conftest.py)."""
    return Path(setting) if Path(setting).is_absolute() else Path(__file__).resolve().parents[2] / setting


def decode_sdrcomp(output: bytes) -> dict[int, list[int]]:
    """sdrcomp prints each record as `N:d:<bytes>`, `\\xx` being a hex byte, anything else itself."""
    records: dict[int, list[int]] = {}
    for line in output.split(b"\n"):
        match = re.match(rb"(\d+):d:(.*)$", line)
        if not match:
            continue
        data, out, i = match.group(2), [], 0
        while i < len(data):
            if data[i : i + 1] == b"\\":
                out.append(int(data[i + 1 : i + 3], 16))
                i += 3
            else:
                out.append(data[i])
                i += 1
        records[int(match.group(1))] = out
    return records


def with_ascii_id(record: list[int], name: str, at: int = 47) -> list[int]:
    """sdrcomp packs all-uppercase names ("CPU_FAN1", "12V") as 6-bit ASCII, which ipmitool and some
    OpenIPMI builds print as garbage; a real AST2400 uses 8-bit ASCII: rewrite the ID string (byte
    48 of a full sensor record, `at` its offset) as type 11b + length, and fix the record length (byte 5)."""
    ident = name.encode()
    fixed = [*record[:at], 0xC0 | len(ident), *ident]
    fixed[4] = len(fixed) - 5
    return fixed


class Bmc:
    """ipmi_sim on <address>:623 with the profile's BMC sensors."""

    def __init__(self, profile: Profile, workdir: Path, address: str, ipmi_sim: str, sdrcomp: str) -> None:
        self.workdir, self.address = workdir, address
        workdir.mkdir(parents=True, exist_ok=True)
        self.sensors = [SimSensor.scaled(i, s) for i, s in enumerate(profile.bmc.sensors, start=1)]
        sdrs = workdir / "bmc.sdrs"
        sdrs.write_text("".join(s.sdr_text() for s in self.sensors))
        compiled = subprocess.run([sdrcomp, str(sdrs)], capture_output=True, timeout=30, check=False)
        if compiled.returncode != 0:
            raise RuntimeError(f"sdrcomp failed: {compiled.stderr.decode(errors='replace')}")
        records = decode_sdrcomp(compiled.stdout)
        emu = ["mc_setbmc 0x20", "mc_add 0x20 0 no-device-sdrs 0x23 9 8 0x9f 0x1291 0xf02"]
        for s in self.sensors:
            record = with_ascii_id(records[s.number], s.sensor.name)
            emu.append("main_sdr_add 0x20 " + " ".join(f"0x{b:02x}" for b in record))
        off = "0" * 15
        for s in self.sensors:
            self.value_file(s).write_text(f"{s.raw(s.nominal())}\n")
            code = SENSOR_KINDS[s.sensor.type][1]
            emu.append(f'sensor_add 0x20 0 {s.number} 0x{code:02x} 0x01 poll 1000 file "{self.value_file(s)}"')
            emu.append(f"sensor_set_event_support 0x20 0 {s.number} enable scanning per-state {off} {off} {off} {off}")
        emu.append("mc_enable 0x20")
        (workdir / "bmc.emu").write_text("\n".join(emu) + "\n")
        (workdir / "lan.conf").write_text(
            "\n".join(
                [
                    'name "e3c236d2i"',
                    "set_working_mc 0x20",
                    "  startlan 1",
                    f"    addr {address} {IPMI_PORT}",
                    "    priv_limit admin",
                    *[
                        f"    allowed_auths_{p} none md2 md5 straight"
                        for p in ("callback", "user", "operator", "admin")
                    ],
                    "    guid a123456789abcdefa123456789abcdef",
                    "  endlan",
                    f'user 2 true "{BMC_USER}" "{BMC_PASSWORD}" admin 10 none md2 md5 straight',
                    "",
                ]
            )
        )
        (workdir / "state").mkdir(exist_ok=True)
        self.process = Process(
            "ipmi_sim",
            [
                ipmi_sim,
                "-c",
                str(workdir / "lan.conf"),
                "-f",
                str(workdir / "bmc.emu"),
                "-s",
                str(workdir / "state"),
                "-n",
            ],
            workdir / "ipmi_sim.log",
        )

    def value_file(self, sensor: SimSensor) -> Path:
        return self.workdir / f"sensor-{sensor.number}"

    def sensor(self, name: str) -> SimSensor:
        return next(s for s in self.sensors if s.sensor.name == name)

    def set(self, name: str, value: float) -> float:
        """Set a sensor's reading (ipmi_sim polls the file every second); returns what the BMC will report."""
        s = self.sensor(name)
        raw = s.raw(value)
        tmp = self.value_file(s).with_suffix(".tmp")
        tmp.write_text(f"{raw}\n")
        tmp.replace(self.value_file(s))
        return s.value(raw)

    def wait_ready(self, ipmitool: str | None, timeout: float = 20) -> str:
        """Wait until the BMC answers `sdr list` over RMCP+; returns ipmitool's listing."""
        if ipmitool is None:
            time.sleep(2)
            self.process.check_alive()
            return ""

        def listing() -> str | None:
            self.process.check_alive()
            done = subprocess.run(
                [
                    ipmitool,
                    "-I",
                    "lanplus",
                    "-H",
                    self.address,
                    "-p",
                    str(IPMI_PORT),
                    "-U",
                    BMC_USER,
                    "-P",
                    BMC_PASSWORD,
                    "-N",
                    "1",
                    "-R",
                    "1",
                    "sdr",
                    "list",
                ],
                capture_output=True,
                text=True,
                errors="replace",
                timeout=15,
                check=False,
            )
            return done.stdout if done.returncode == 0 and self.sensors[0].sensor.name in done.stdout else None

        return str(wait_until(listing, timeout, "ipmi_sim did not answer over RMCP+", step=0.5))

    def stop(self) -> None:
        self.process.stop()


def bmc_address() -> str:
    """127.0.0.1 when nothing holds UDP 623 there, else another loopback address (collectd's ipmi
    plugin only talks to port 623, so a second simulator on this machine needs its own address)."""
    for last in ["1", *[str(n) for n in range(23, 250, 17)]]:
        address = f"127.0.0.{last}"
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            try:
                s.bind((address, IPMI_PORT))
            except OSError:
                continue
            return address
    raise RuntimeError(f"UDP port {IPMI_PORT} is taken on every loopback address tried")


# collectd exec stand-ins -----------------------------------------------------------------------------
def types_db(path: Path = TYPES_DB) -> dict[str, list[tuple[str, str]]]:
    """type -> [(ds name, GAUGE|DERIVE|COUNTER|ABSOLUTE)] from collectd's types.db."""
    types: dict[str, list[tuple[str, str]]] = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, rest = line.split(None, 1)
        types[name] = [(ds.split(":")[0], ds.split(":")[1]) for ds in rest.replace(",", " ").split()]
    return types


# Plausible values per catalog kind: gauges, and per-second rates for DERIVE data sources.
GAUGE_BY_KIND = {
    "temperature": 38.0,
    "fanspeed": 1200.0,
    "voltage": 12.0,
    "power": 40.0,
    "current": 1.0,
    "percent": 37.0,
    "bytes": 3.2e11,
    "count": 0.0,
    "seconds": 12.0,
    "ratio": 93.0,
    "connections": 3.0,
    "load": 0.4,
    "days": 60.0,  # a certificate renewed a month ago
}
RATE_BY_KIND = {
    "bytes_rate": 2.5e6,
    "ops_rate": 120.0,
    "seconds": 0.05,
    "packets_rate": 800.0,
    "errors_rate": 0.0,
}
SMART_ATTRIBUTE = {"current": 100.0, "worst": 100.0, "threshold": 36.0, "pretty": 0.0}

STAND_IN_PROGRAM = r'''"""collectd exec stand-in (homelab e2e test): PUTVAL its spec's series."""
import json, math, os, sys, time

spec = json.load(open(sys.argv[1]))
interval = float(os.environ.get("COLLECTD_INTERVAL") or spec["interval"])
start = time.time()
while True:
    now = time.time()
    for i, item in enumerate(spec["values"]):
        values = []
        for kind, base, wobble in item["ds"]:
            if kind == "derive":  # a counter growing at `base` per second
                values.append(str(int(base * (now - start))))
            elif kind == "now":
                values.append(str(int(now)))
            else:
                values.append(repr(round(base * (1 + wobble * math.sin(now / 45 + i)), 4)))
        print('PUTVAL "%s" interval=%g N:%s' % (item["id"], interval, ":".join(values)), flush=True)
    time.sleep(max(0.05, interval - (time.time() - start) % interval))
'''


def stand_in_spec(series: list[Series], interval: int, types: dict[str, list[tuple[str, str]]]) -> dict[str, Any]:
    """One PUTVAL per collectd identifier (all data sources of its type at once)."""
    by_identifier: dict[str, list[Series]] = {}
    for s in series:
        by_identifier.setdefault(s.identifier, []).append(s)
    values = []
    for identifier, members in by_identifier.items():
        first = members[0]
        ds_values = []
        for ds_name, ds_type in types[first.type]:
            if first.type == "smart_attribute":
                ds_values.append(("gauge", SMART_ATTRIBUTE[ds_name], 0.0))
            elif first.kind == "timestamp":
                ds_values.append(("now", 0.0, 0.0))
            elif ds_type in ("DERIVE", "COUNTER"):
                ds_values.append(("derive", RATE_BY_KIND.get(first.kind, 1.0), 0.0))
            else:
                wobble = 0.0 if first.kind == "count" else 0.04
                ds_values.append(("gauge", GAUGE_BY_KIND.get(first.kind, 1.0), wobble))
        values.append({"id": identifier, "ds": ds_values})
    return {"interval": interval, "values": values}


# why each plugin cannot run here, said in the rendered config next to its stand-in
STAND_IN_REASONS = {
    "sensors": "no lm-sensors chips (coretemp) on this machine",
    "thermal": "no ACPI thermal zones in /sys/class/thermal",
    "smart": "no SATA disks to read SMART from",
    "disk": "none of the profile's disks (sda..sdf) exist",
    "df": "the datasets' mountpoints are not mounted here",
    "zfs_arc": "no ZFS kernel module (/proc/spl/kstat/zfs/arcstats)",
    "interface": "the profile's NIC (eno1) does not exist here",
    "exec": "the backup-status and cert-expiry programs live in the collectd image, not on this machine",
    "containers": "the example's services do not run here (tests/monitoring/test_containers_real.py runs it)",
}
# catalog plugin names of the series a replaced collectd plugin sends
SERIES_PLUGINS = {"exec": ("backup", "certs"), "containers": ("container",)}


def stand_ins(catalog: Catalog, plugins: list[str], directory: Path) -> dict[str, StandIn]:
    """Real collectd exec programs for `plugins` (named by the caller), written under `directory`
    (world-readable: collectd runs exec programs as `nobody`)."""
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o755)
    program = directory / "standin.py"
    program.write_text(STAND_IN_PROGRAM)
    program.chmod(0o644)
    types = types_db()
    grouped = catalog.by_plugin()
    result: dict[str, StandIn] = {}
    for plugin in plugins:
        series = [s for name in SERIES_PLUGINS.get(plugin, (plugin,)) for s in grouped.get(name, [])]
        if not series:
            raise ValueError(f"the catalog has no series for plugin {plugin!r}: nothing to stand in for")
        spec = directory / f"{plugin}.json"
        spec.write_text(json.dumps(stand_in_spec(series, catalog.interval, types), indent=1))
        spec.chmod(0o644)
        wrapper = directory / f"standin-{plugin}"
        wrapper.write_text(f'#!/bin/sh\nexec /usr/bin/python3 -u "{program}" "{spec}"\n')
        wrapper.chmod(0o755)
        result[plugin] = StandIn(str(wrapper), f"{plugin}: {STAND_IN_REASONS.get(plugin, 'not on this machine')}")
    return result


# carbon ------------------------------------------------------------------------------------------------
GRAPHITE_FILES = ("carbon.conf", "storage-schemas.conf", "storage-aggregation.conf")


@dataclass
class Carbon:
    """carbon-cache from the rendered files, paths under `root`, ports on loopback."""

    program: str
    root: Path
    carbon_conf: str
    schemas: str
    aggregation: str
    line_port: int = field(default_factory=free_port)
    pickle_port: int = field(default_factory=free_port)
    query_port: int = field(default_factory=free_port)
    process: Process | None = None
    starts: int = 0

    def __post_init__(self) -> None:
        self.conf_dir = self.root / "conf"
        self.storage = self.root / "storage"
        self.whisper_dir = self.storage / "whisper"
        self.conf_dir.mkdir(parents=True, exist_ok=True)
        (self.storage / "log").mkdir(parents=True, exist_ok=True)
        text = self.carbon_conf.replace("/opt/graphite/storage", str(self.storage)).replace(
            "0.0.0.0",  # noqa: S104 - the rendered (container) address, replaced by loopback
            "127.0.0.1",
        )
        text = re.sub(r"(?m)^LINE_RECEIVER_PORT = \d+$", f"LINE_RECEIVER_PORT = {self.line_port}", text)
        text = re.sub(r"(?m)^PICKLE_RECEIVER_PORT = \d+$", f"PICKLE_RECEIVER_PORT = {self.pickle_port}", text)
        text = re.sub(r"(?m)^CACHE_QUERY_PORT = \d+$", f"CACHE_QUERY_PORT = {self.query_port}", text)
        (self.conf_dir / "carbon.conf").write_text(text)
        (self.conf_dir / "storage-schemas.conf").write_text(self.schemas)
        (self.conf_dir / "storage-aggregation.conf").write_text(self.aggregation)

    @classmethod
    def from_rendering(cls, program: str, root: Path, files: Mapping[str, bytes]) -> Carbon:
        """carbon-cache with the three files the render wrote for it (monitoring/graphite/)."""
        conf = [files[f"monitoring/graphite/{name}"].decode() for name in GRAPHITE_FILES]
        return cls(program, root, *conf)

    def start(self, timeout: float = 30) -> None:
        self.launch()
        self.wait_listening(timeout)

    def launch(self) -> None:
        self.starts += 1
        self.process = Process(
            "carbon-cache",
            [
                self.program,
                f"--config={self.conf_dir / 'carbon.conf'}",
                f"--pidfile={self.root / 'carbon.pid'}",
                f"--logdir={self.storage / 'log'}",
                "--nodaemon",
                "start",
            ],
            self.root / f"carbon-{self.starts}.out",
        )

    def wait_listening(self, timeout: float = 30) -> None:
        def listening() -> bool:
            assert self.process is not None
            self.process.check_alive()
            try:
                socket.create_connection(("127.0.0.1", self.line_port), timeout=1).close()
                return True
            except OSError:
                return False

        wait_until(listening, timeout, "carbon-cache did not listen")

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop(grace=15)
            self.process = None
        with contextlib.suppress(FileNotFoundError):
            (self.root / "carbon.pid").unlink()

    def wsp_files(self) -> list[Path]:
        return sorted(self.whisper_dir.rglob("*.wsp"))

    def file_for(self, path: str) -> Path:
        return self.whisper_dir / (path.replace(".", "/") + ".wsp")


# graphite-web ----------------------------------------------------------------------------------------
SERVE_GRAPHITE = """# graphite-web's WSGI app on a threaded wsgiref server (what `django-admin runserver`
# uses, without its start-up checks, which take many seconds on a loaded 2-core machine)
import sys
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server


class Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class Quiet(WSGIRequestHandler):
    def log_message(self, *args):
        pass


from graphite.wsgi import application  # noqa: E402

server = make_server("127.0.0.1", int(sys.argv[1]), application, server_class=Server, handler_class=Quiet)
server.serve_forever()
"""


class GraphiteWeb:
    """graphite-web (PyPI, this venv) serving its render API on 127.0.0.1. The render API reads
    whisper files and carbon's cache (CARBONLINK_HOSTS) only: no database is needed for it (the
    `migrate` of the docs' recipe is for /metrics/find's user profiles, the browser and dashboards)."""

    def __init__(self, root: Path, storage: Path, carbonlink_port: int | None) -> None:
        self.root, self.port = root, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        conf = root / "conf"
        conf.mkdir(parents=True, exist_ok=True)
        (storage / "log" / "webapp").mkdir(parents=True, exist_ok=True)
        # graphite-web only searches the whisper dir if it exists when its settings load
        (storage / "whisper").mkdir(parents=True, exist_ok=True)
        links = [f"127.0.0.1:{carbonlink_port}"] if carbonlink_port else []
        (conf / "homelab_e2e_graphite_settings.py").write_text(
            "\n".join(
                [
                    "# graphite-web settings for homelab's loopback tests",
                    'SECRET_KEY = "homelab-e2e-only"',
                    f"STORAGE_DIR = {str(storage)!r}",
                    f"CARBONLINK_HOSTS = {links!r}",
                    "CARBONLINK_TIMEOUT = 2.0",
                    'ALLOWED_HOSTS = ["127.0.0.1", "localhost"]',
                    'TIME_ZONE = "UTC"',
                    "",
                ]
            )
        )
        (conf / "serve.py").write_text(SERVE_GRAPHITE)
        env = {
            **os.environ,
            "PYTHONPATH": str(conf),
            "GRAPHITE_SETTINGS_MODULE": "homelab_e2e_graphite_settings",
            "DJANGO_SETTINGS_MODULE": "graphite.settings",
            "GRAPHITE_CONF_DIR": str(conf),
            "GRAPHITE_STORAGE_DIR": str(storage),
        }
        self.process = Process(
            "graphite-web",
            [sys.executable, str(conf / "serve.py"), str(self.port)],
            root / "graphite-web.log",
            env=env,
            cwd=root,
        )

    def wait_ready(self, timeout: float = 120) -> None:
        def answers() -> bool:
            self.process.check_alive()
            try:
                self.get("/render", {"target": "homelab.nothing", "format": "json"}, timeout=10)
                return True
            except OSError:
                return False

        wait_until(answers, timeout, "graphite-web did not answer", step=0.5)

    def get(self, path: str, params: dict[str, Any] | list[tuple[str, Any]], timeout: float = 30) -> bytes:
        url = f"{self.url}{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - loopback
            return bytes(response.read())

    def render(self, target: str, from_: str = "-5min", until: str = "now") -> list[dict[str, Any]]:
        return list(
            json.loads(self.get("/render", {"target": target, "from": from_, "until": until, "format": "json"}))
        )

    def render_many(self, targets: list[str], from_: str) -> dict[str, list[tuple[int, float]]]:
        """Non-null points of each target, from one POSTed render (each target wrapped in an alias
        naming its position, so a target without data is simply absent from the answer)."""
        params = [("target", f"alias({t},'q{i}')") for i, t in enumerate(targets)]
        params += [("from", from_), ("format", "json")]
        body = urllib.parse.urlencode(params).encode()
        request = urllib.request.Request(f"{self.url}/render", data=body)  # noqa: S310 - loopback
        with urllib.request.urlopen(request, timeout=60) as response:  # noqa: S310 - loopback
            answer = json.loads(response.read())
        by_name = {series["target"]: points([series]) for series in answer}
        return {t: by_name.get(f"q{i}", []) for i, t in enumerate(targets)}

    def stop(self) -> None:
        self.process.stop()


def points(result: list[dict[str, Any]]) -> list[tuple[int, float]]:
    """Every non-null (timestamp, value) of a render answer, oldest first."""
    found = [(int(ts), float(v)) for series in result for v, ts in series["datapoints"] if v is not None]
    return sorted(found)


# collectd -----------------------------------------------------------------------------------------------
class Collectd:
    def __init__(self, program: str, conf: Path, log: Path) -> None:
        self.conf = conf
        self.started = time.time()
        self.process = Process("collectd", [program, "-f", "-C", str(conf)], log)

    def stop(self) -> None:
        self.process.stop()
