"""The rendered monitoring files in the real consumers: collectd 5.12 parses collectd.conf (and the
IPMI include), carbon-cache starts with the rendered carbon.conf/schemas/aggregation and stores a
line in a whisper file with the catalog's retentions and aggregation."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from homelab.config.loader import load
from homelab.config.monitoring import Ipmi
from homelab.monitoring.catalog_builder import catalog_for
from homelab.plan import build_plan
from homelab.render import render_all
from homelab.render.collectd import (
    CGROUP_ROOT,
    CONTAINERS_DIR,
    PYTHON_MODULE_DIR,
    bmc_states_module,
    containers_module,
    ipmi_conf,
)
from homelab.render.graphite import carbon_conf

pytestmark = pytest.mark.real

SECRETS = {"secrets/ddns-password": "x", "secrets/b2-account": "x", "secrets/b2-key": "x"}
# What collectd logs when the configuration (not the machine) is wrong.
CONFIG_ERRORS = re.compile(
    r"Parsing the config file failed|failed to handle option|did not register for value|Could not find plugin|"
    r"but the plugin isn't loaded|Unknown (config )?(option|key)|syntax error|Invalid",
    re.IGNORECASE,
)
RUNTIME_REPORT = re.compile(r"domain_connection_change_handler|connection", re.IGNORECASE)
READ_FAILED = re.compile(r"read-function of plugin `([^'/]+)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def collectd_check(collectd: str, conf: Path) -> tuple[list[str], set[str]]:
    """Config errors and plugins whose read failed, from one `collectd -T` pass (init + one read of
    every plugin). `collectd -t` alone proves little: 5.12 exits 0 even on a syntax error."""
    done = subprocess.run(
        [collectd, "-t", "-C", str(conf)], capture_output=True, text=True, errors="replace", timeout=30
    )
    assert done.returncode == 0, done.stderr
    log_path = conf.with_suffix(".log")
    with log_path.open("w") as log_file:
        # its own process group: exec children collectd forks can outlive `-T`; they are killed below
        run = subprocess.Popen(
            [collectd, "-T", "-C", str(conf)], stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            run.wait(timeout=60)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(run.pid, signal.SIGKILL)
            run.wait()
    # collectd 5.12 exec plugin logs a freed program name ("Program `\xffC...' has closed STDERR"): not UTF-8
    log = log_path.read_text(errors="replace")
    # the ipmi plugin reports a refused BMC connection ("... OS: Invalid argument") at run time: not a config error
    errors = [line for line in log.splitlines() if CONFIG_ERRORS.search(line) and not RUNTIME_REPORT.search(line)]
    return errors, set(READ_FAILED.findall(log))


def localize(conf: str, tmp_path: Path, include: Path | None = None) -> str:
    """The rendered file with its host paths and ports moved into the test's sandbox."""
    conf = conf.replace('"/run/collectd.sock"', f'"{tmp_path}/collectd.sock"')
    conf = conf.replace('Port "2003"', f'Port "{free_port()}"')  # nothing listens: no stray traffic
    if include:
        conf = conf.replace('"/etc/collectd/ipmi.conf"', f'"{include}"')
    # the python plugins' modules, as the image installs them, and the host paths its mounts show
    (tmp_path / "bmc_states.py").write_text(bmc_states_module())
    (tmp_path / "containers.py").write_text(containers_module())
    conf = conf.replace(f'ModulePath "{PYTHON_MODULE_DIR}"', f'ModulePath "{tmp_path}"')
    conf = conf.replace(f'"{CGROUP_ROOT}"', '"/sys/fs/cgroup"')
    return conf.replace(f'"{CONTAINERS_DIR}"', '"/var/lib/docker/containers"')


def test_checker_sees_config_errors(require_program, tmp_path: Path) -> None:
    collectd = require_program("collectd")
    bad = tmp_path / "bad.conf"
    bad.write_text(
        "LoadPlugin logfile\n<Plugin logfile>\n File STDOUT\n</Plugin>\n"
        "LoadPlugin cpu\n<Plugin cpu>\n ReportByCpuu false\n</Plugin>\n"
    )
    errors, _ = collectd_check(collectd, bad)
    assert errors


@pytest.mark.parametrize("mode", ["local", "lan"])
def test_collectd_parses_rendered_config(require_program, example_config: Path, tmp_path: Path, mode: str) -> None:
    collectd = require_program("collectd")
    loaded = load(example_config)
    secrets = dict(SECRETS)
    if mode == "lan":
        ipmi = Ipmi(mode="lan", address="127.0.0.1", username="monitor", password_file="secrets/bmc")
        secrets["secrets/bmc"] = "s3cret"
        config = loaded.config.model_copy(
            update={"monitoring": loaded.config.monitoring.model_copy(update={"ipmi": ipmi})}
        )
        loaded = replace(loaded, config=config)
    plan = build_plan(loaded)
    rendering = render_all(plan, secrets)
    include = None
    if mode == "lan":
        include = tmp_path / "ipmi.conf"
        include.write_bytes(rendering.secret_files["monitoring_collectd_ipmi_conf"])
    conf = tmp_path / "collectd.conf"
    conf.write_text(localize(rendering.files["monitoring/collectd/collectd.conf"].decode(), tmp_path, include))

    errors, failed_reads = collectd_check(collectd, conf)

    assert errors == []
    catalog = catalog_for(plan)
    hardware = {p.name for p in catalog.plugins if p.needs_hardware}
    # only plugins that need hardware this machine lacks may fail to read
    assert failed_reads <= hardware, failed_reads - hardware
    assert "cpu" not in failed_reads and "memory" not in failed_reads


def test_ipmi_include_with_quotes_parses(require_program, tmp_path: Path) -> None:
    collectd = require_program("collectd")
    include = tmp_path / "ipmi.conf"
    include.write_text(ipmi_conf("127.0.0.1", "monitor", 'we"ird\\pass'))
    conf = tmp_path / "collectd.conf"
    conf.write_text(
        f'LoadPlugin logfile\n<Plugin logfile>\n File STDOUT\n</Plugin>\nLoadPlugin ipmi\nInclude "{include}"\n'
    )
    errors, _ = collectd_check(collectd, conf)
    assert errors == []


def test_carbon_stores_a_line_with_catalog_schema(require_program, example_config: Path, tmp_path: Path) -> None:
    carbon = require_program("carbon-cache")
    whisper = pytest.importorskip("whisper")
    plan = build_plan(load(example_config))
    catalog = catalog_for(plan)
    rendering = render_all(plan, SECRETS)
    conf_dir = tmp_path / "conf"
    storage = tmp_path / "storage"
    conf_dir.mkdir()
    (storage / "log").mkdir(parents=True)
    line_port, pickle_port, query_port = free_port(), free_port(), free_port()
    text = carbon_conf(catalog, storage_dir=str(storage), line_port=line_port)
    text = (
        text.replace("0.0.0.0", "127.0.0.1")  # noqa: S104 - moving it off all interfaces
        .replace("PICKLE_RECEIVER_PORT = 2004", f"PICKLE_RECEIVER_PORT = {pickle_port}")
        .replace("CACHE_QUERY_PORT = 7002", f"CACHE_QUERY_PORT = {query_port}")
    )
    assert "MAX_CREATES_PER_MINUTE = 1000" in text
    (conf_dir / "carbon.conf").write_text(text)
    for name in ("storage-schemas.conf", "storage-aggregation.conf"):
        (conf_dir / name).write_bytes(rendering.files[f"monitoring/graphite/{name}"])
    process = subprocess.Popen(
        [
            carbon,
            f"--config={conf_dir / 'carbon.conf'}",
            f"--pidfile={tmp_path / 'carbon.pid'}",
            f"--logdir={storage / 'log'}",
            "--nodaemon",
            "start",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                client = socket.create_connection(("127.0.0.1", line_port), timeout=1)
                break
            except OSError:
                assert process.poll() is None, process.stdout.read() if process.stdout else ""
                assert time.monotonic() < deadline, "carbon-cache did not listen"
                time.sleep(0.2)
        temp = catalog.one(plugin="ipmi", type_instance="CPU Temp processor (3.1)")
        fan = catalog.one(plugin="ipmi", type_instance="CPU_FAN1 fan_cooling (29.1)")
        now = int(time.time())
        with client:
            client.sendall(f"{temp.path} 42 {now}\n{fan.path} 1500 {now}\n".encode())
        files = {s: storage / "whisper" / (s.path.replace(".", "/") + ".wsp") for s in (temp, fan)}
        deadline = time.monotonic() + 20
        while not all(f.exists() and f.stat().st_size > 0 for f in files.values()):
            assert time.monotonic() < deadline, "no whisper file"
            time.sleep(0.2)
        info = whisper.info(str(files[temp]))
        assert [(a["secondsPerPoint"], a["points"]) for a in info["archives"]] == [
            (r.precision, r.points) for r in catalog.retentions
        ]
        assert info["aggregationMethod"] == "max"
        assert whisper.info(str(files[fan]))["aggregationMethod"] == "min"
        assert files[temp].stat().st_size == catalog.whisper_bytes_per_series()
        deadline = time.monotonic() + 20
        while True:  # carbon flushes its cache to disk asynchronously
            _, values = whisper.fetch(str(files[temp]), now - 60, now + 10)
            if 42.0 in values:
                break
            assert time.monotonic() < deadline, values
            time.sleep(0.3)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def test_collectd_parses_the_rename_chain_of_hostile_sensor_names(
    require_program, example_config: Path, tmp_path: Path
) -> None:
    """Sensor names with quotes, backslashes, parentheses and regex characters become rename rules
    collectd 5.12 accepts (match_regex compiles each one at load)."""
    from homelab.monitoring import discover

    collectd = require_program("collectd")
    listing = "\n".join(
        [
            'Fan "1"          | 41h | ok  | 29.1 | 1300 RPM',
            "CPU\\Temp (die)   | 01h | ok  |  3.1 | 40 degrees C",
            "+12V [rail]*?    | 30h | ok  |  7.1 | 12.06 Volts",
            "Temp             | 0Eh | ok  |  3.1 | 44 degrees C",
            "Temp             | 0Fh | ok  |  3.2 | 43 degrees C",
        ]
    )

    class Bmc:
        def sdr(self) -> str:
            return listing

        def sensors(self) -> str:
            return ""

    found = discover.discover(Bmc(), None).inventory
    assert len(found.collected()) == 5
    raw = yaml.safe_load(example_config.read_text())
    raw["monitoring"]["inventory"] = "inventory.yaml"
    example_config.write_text(yaml.safe_dump(raw))
    (example_config.parent / "inventory.yaml").write_text(discover.dump(found))
    conf_text = (
        render_all(build_plan(load(example_config)), SECRETS).files["monitoring/collectd/collectd.conf"].decode()
    )
    assert conf_text.count("<Rule ") == 5
    conf = tmp_path / "collectd.conf"
    conf.write_text(localize(conf_text, tmp_path))
    errors, _failed = collectd_check(collectd, conf)
    assert errors == []
