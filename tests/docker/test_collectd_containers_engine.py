"""Issue 20: the containers plugin (homelab/collectd_plugins/containers.py) inside the REAL collectd image, run
as the rendered compose runs the collectd service: the image from the rendered Dockerfile (the packages its
`apt-get install` names, the files its COPY lines copy, its CMD), and the service's own keys from the
rendered monitoring/compose.yaml translated to `docker run` (cap_drop ALL + exactly the facts' cap_add,
no-new-privileges, the limits, host network, and the two read-only binds the plugin reads: the host's
/sys/fs/cgroup and the engine's containers folder). A real target container with a memory limit, labelled as
the example's dev/rstudio service, restarted once by its policy: collectd must hand out its memory in use,
its limit, its CPU and its restart count (read from collectd itself over its unixsock, `collectdctl getval`).

The same service without either bind, or run as a user that does not own the engine's files (root:root
0710 folder, 0600 config.v2.json: collectd reads them as their owner, no DAC_OVERRIDE or DAC_READ_SEARCH),
must visibly fail: the plugin's error in collectd's log and no container series."""

from __future__ import annotations

import dataclasses
import json
import re
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from dockerlab import free_port, wait_for
from standins import BOOKWORM_SLIM, IMAGE_PATH, PREFIX, Rootfs, add_debian_packages, docker

from homelab.config.loader import load
from homelab.images.facts import all_facts
from homelab.monitoring.catalog_builder import catalog_for
from homelab.monitoring.series import Catalog
from homelab.plan import build_plan
from homelab.render import render_all
from homelab.render.collectd import CGROUP_ROOT, CONTAINERS_DIR, SOCKET, collectd_conf

pytestmark = pytest.mark.docker

INTERVAL = 2
LIMIT = 64 << 20
HOST = "nas"  # the example's server.hostname: collectd's Hostname
KEY = "dev-rstudio"  # the series key the rendered collectd.conf gives compose project homelab-dev, service rstudio
SECRETS = {f"secrets/{name}": "x" for name in ("ddns-password", "b2-account", "b2-key")}
# exits on its first run (the engine restarts it: RestartCount 1), then spends a little CPU every second
TARGET = (
    "if [ ! -e /tmp/ran ]; then touch /tmp/ran; exit 3; fi; "
    "while :; do i=0; while [ $i -lt 3000 ]; do i=$((i + 1)); done; sleep 1; done"
)
# the compose keys of the collectd service this test runs as `docker run`; any other key fails the test
IGNORED = {"image", "build", "restart", "healthcheck", "logging"}  # the image is built below; no restarts here


def _only_containers(catalog: Catalog) -> Catalog:
    keep = ("containers", "uptime")  # uptime: a series that shows collectd runs when the plugin cannot
    return dataclasses.replace(
        catalog,
        plugins=tuple(p for p in catalog.plugins if p.name in keep),
        series=tuple(s for s in catalog.series if s.plugin in ("container", "uptime")),
    )


def _rendering(tmp_path: Path) -> dict[str, bytes]:
    from tests.conftest import EXAMPLE, EXAMPLE_SECRETS, write_secret

    config = tmp_path / "example" / "homelab.yaml"
    config.parent.mkdir()
    raw = yaml.safe_load(EXAMPLE.read_text())
    raw["monitoring"]["interval"] = INTERVAL
    config.write_text(yaml.safe_dump(raw, sort_keys=False))
    for name in EXAMPLE_SECRETS:
        write_secret(config.parent / "secrets" / name, f"example-{name}-value")
    plan = build_plan(load(config))
    files = dict(render_all(plan, SECRETS).files)
    # collectd.conf: the renderer's, for the containers plugin alone (no BMC, disks or exec programs here);
    # write_graphite to a port nobody listens on (the values are read over the unixsock)
    files["collectd.conf"] = collectd_conf(_only_containers(catalog_for(plan)), carbon_port=free_port()).encode()
    return files


def _collectd_image(workdir: Path, files: dict[str, bytes]) -> str:
    """The image the rendered monitoring/collectd/Dockerfile builds, from this bookworm host's packages."""
    dockerfile = re.sub(r"\\\n\s*", " ", files["monitoring/collectd/Dockerfile"].decode())
    installed = re.search(r"apt-get install -y --no-install-recommends ([^&]+)", dockerfile)
    cmd = re.search(r"^CMD (\[.*\])$", dockerfile, re.M)
    assert installed and cmd and "FROM debian:bookworm-slim" in dockerfile, dockerfile
    root = Rootfs(workdir / "collectd.tar")
    add_debian_packages(root, (*BOOKWORM_SLIM, *installed.group(1).split()))
    executable = {p for line in re.findall(r"^RUN chmod 0755 (.+)$", dockerfile, re.M) for p in line.split()}
    for source, target in re.findall(r"^COPY (\S+) (\S+)$", dockerfile, re.M):
        mode = 0o755 if target in executable else 0o644
        root.file(target.lstrip("/"), data=files[f"monitoring/collectd/{source}"], mode=mode)
    return root.import_as(f"{PREFIX}/collectd:containers", f"ENV PATH={IMAGE_PATH}", f"CMD {cmd.group(1)}")


def _run_args(service: dict[str, Any], conf: Path, *, without: str = "") -> list[str]:
    """`docker run` arguments for the rendered compose service: its binds (the collectd.conf one pointed at
    `conf`, the plugin's `without` left out, the ones whose source this host lacks skipped: /tank), its
    devices this host has (none: no disks, no BMC), capabilities, security options and limits."""
    unknown = set(service) - IGNORED - set(_TRANSLATE) - {"volumes", "devices"}
    assert not unknown, f"the collectd service has keys this test does not translate: {sorted(unknown)}"
    args: list[str] = []
    for key, option in _TRANSLATE.items():
        value = service.get(key)
        if value is None or value is False:
            continue
        if value is True:
            args.append(option)
        elif isinstance(value, dict):
            args += [a for k, v in value.items() for a in (option, f"{k}={v}")]
        else:
            args += [a for v in (value if isinstance(value, list) else [value]) for a in (option, str(v))]
    for volume in service["volumes"]:
        assert volume["type"] == "bind", volume
        source, target = volume["source"], volume["target"]
        if target == without:
            continue
        if target == "/etc/collectd/collectd.conf":
            source = str(conf)
        elif not Path(source).exists():
            assert target not in (CGROUP_ROOT, CONTAINERS_DIR), volume
            continue
        readonly = ",readonly" if volume.get("read_only") else ""
        args += ["--mount", f"type=bind,source={source},target={target}{readonly}"]
    for device in service.get("devices", []):
        if Path(device.split(":")[0]).exists():
            args += ["--device", device]
    return args


_TRANSLATE = {
    "security_opt": "--security-opt",
    "cap_drop": "--cap-drop",
    "cap_add": "--cap-add",
    "mem_limit": "--memory",
    "mem_reservation": "--memory-reservation",
    "memswap_limit": "--memory-swap",
    "pids_limit": "--pids-limit",
    "cpu_shares": "--cpu-shares",
    "cpus": "--cpus",
    "environment": "--env",
    "network_mode": "--network",
    "read_only": "--read-only",
    "tmpfs": "--tmpfs",
    "user": "--user",
}


def _values(name: str) -> dict[str, float]:
    """Every container-<KEY> value collectd holds, by `type-instance`, over its unixsock."""
    listed = docker("exec", name, "collectdctl", "-s", SOCKET, "listval", check=False)
    found = {}
    for line in listed.stdout.splitlines():
        identifier = line.split()[-1] if line.strip() else ""
        if identifier.startswith(f"{HOST}/container-{KEY}/"):
            got = docker("exec", name, "collectdctl", "-s", SOCKET, "getval", identifier, check=False).stdout
            value = dict(pair.split("=", 1) for pair in got.split() if "=" in pair).get("value")
            if value is not None:
                found[identifier.rsplit("/", 1)[1]] = float(value)
    return found


def _logs(name: str) -> str:
    out = docker("logs", name, check=False)
    return out.stdout + out.stderr


def test_the_containers_plugin_reads_a_real_container_with_exactly_collectds_capabilities(  # type: ignore[no-untyped-def]
    engine, tmp_path: Path
) -> None:
    files = _rendering(tmp_path)
    compose = yaml.safe_load(files["monitoring/compose.yaml"])
    service = compose["services"]["collectd"]
    facts = next(f for f in all_facts().values() if f.name == "collectd")
    assert service["cap_drop"] == ["ALL"] and sorted(service["cap_add"]) == sorted(facts.capabilities or {})
    binds = {v["target"]: v for v in service["volumes"]}
    engine_dir = docker("info", "--format", "{{.DockerRootDir}}").stdout.strip() + "/containers"
    assert binds[CONTAINERS_DIR]["source"] == engine_dir and binds[CGROUP_ROOT]["source"] == "/sys/fs/cgroup"
    assert binds[CONTAINERS_DIR]["read_only"] and binds[CGROUP_ROOT]["read_only"]
    conf = tmp_path / "collectd.conf"
    conf.write_bytes(files["collectd.conf"])
    text = files["collectd.conf"].decode()
    assert f'CgroupRoot "{CGROUP_ROOT}"' in text and f'ContainersDir "{CONTAINERS_DIR}"' in text
    assert 'Service "dev-rstudio" "homelab-dev" "rstudio"' in text

    suffix = uuid.uuid4().hex[:8]
    busybox = Rootfs(tmp_path / "busybox.tar")
    busybox.busybox()
    target_image = busybox.import_as(f"{PREFIX}/containers-target:{suffix}")
    image = _collectd_image(tmp_path, files)
    names: list[str] = []
    try:
        target = f"homelab-test-target-{suffix}"
        names.append(target)
        docker("run", "-d", "--name", target, "--memory", str(LIMIT), "--restart", "unless-stopped",
               "--label", "com.docker.compose.project=homelab-dev", "--label", "com.docker.compose.service=rstudio",
               "--entrypoint", "/bin/sh", target_image, "-c", TARGET)  # fmt: skip

        def restarted_and_running() -> bool:
            state = json.loads(docker("inspect", target).stdout)[0]
            return bool(state["RestartCount"] == 1 and state["State"]["Running"])

        wait_for(restarted_and_running, 60, "the target restarted once by its policy")

        def run(label: str, *extra: str, without: str = "") -> str:
            name = f"homelab-test-collectd-{label}-{suffix}"
            names.append(name)
            docker("run", "-d", "--name", name, *_run_args(service, conf, without=without), *extra, image)
            return name

        collectd = run("as-rendered")
        no_records = run("no-records", without=CONTAINERS_DIR)
        no_cgroups = run("no-cgroups", without=CGROUP_ROOT)
        not_owner = run("not-owner", "--user", "65534:65534")
        inspected = json.loads(docker("inspect", collectd).stdout)[0]["HostConfig"]
        added = sorted(c.removeprefix("CAP_") for c in inspected["CapAdd"])
        assert inspected["CapDrop"] == ["ALL"] and added == sorted(facts.capabilities or {}), inspected

        wanted = {"memory-used", "memory-limit", "percent-cpu", "count-restarts", "count-oom_kills"}
        wait_for(lambda: wanted <= set(_values(collectd)), 30 * INTERVAL, f"collectd to hand out {sorted(wanted)}")
        values = _values(collectd)
        assert values["memory-limit"] == pytest.approx(LIMIT, rel=1e-6), values  # GETVAL prints %e: 7 digits
        assert 0 < values["memory-used"] < LIMIT, values
        assert 0 < values["percent-cpu"] < 100, values  # a shell counting to 3000 once a second
        assert values["count-restarts"] == 1 and values["count-oom_kills"] == 0, values
        log = _logs(collectd)
        assert "containers:" not in log and "Traceback" not in log, log[-3000:]

        # each failure is the plugin's own, logged once, and not one container series comes out
        refused = {
            no_records: f"containers: the engine's containers folder {CONTAINERS_DIR}: [Errno 2]",
            no_cgroups: f"containers: no cgroup hierarchy under {CGROUP_ROOT}",
            not_owner: f"containers: the engine's containers folder {CONTAINERS_DIR}: [Errno 13] Permission denied",
        }
        for name, message in refused.items():
            wait_for(lambda name=name, message=message: message in _logs(name), 30 * INTERVAL, message)
        for name in (no_records, no_cgroups):  # their unixsock answers: collectd runs, without the series
            wait_for(lambda name=name: "uptime" in docker("exec", name, "collectdctl", "-s", SOCKET, "listval",
                                                          check=False).stdout, 30 * INTERVAL, "uptime")  # fmt: skip
            assert _values(name) == {}, name
    finally:
        for name in names:
            docker("rm", "-f", name, check=False)
        docker("rmi", "-f", f"{PREFIX}/collectd:containers", f"{PREFIX}/containers-target:{suffix}", check=False)


def test_the_only_cgroup_v2_read_this_hybrid_host_allows(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """This host is cgroup v1 with the hybrid cgroup2 mount at /sys/fs/cgroup/unified, where only hugetlb is
    a controller (docs/monitoring.md, Containers: why no full v2 read here). The engine creates each
    container's cgroup there too: its cpu.stat is the kernel's real v2 file, and the plugin's parser reads
    from it the CPU time v1's cpuacct.usage counts. Its memory files are not there (memory is bound to its
    v1 hierarchy), so the plugin pointed at that hierarchy says so, once, instead of silently sending no
    memory and no CPU for any container; pointed at /sys/fs/cgroup (the rendered mount) it reads v1."""
    from homelab.collectd_plugins import containers as plugin
    from tests.monitoring.test_containers import FakeCollectd

    unified = "/sys/fs/cgroup/unified"
    if not Path(unified, "cgroup.controllers").is_file() or Path("/sys/fs/cgroup/cgroup.controllers").exists():
        pytest.fail(f"not a hybrid cgroup host (no cgroup2 at {unified}): this test is written for one")
    suffix = uuid.uuid4().hex[:8]
    busybox = Rootfs(tmp_path / "busybox.tar")
    busybox.busybox()
    image = busybox.import_as(f"{PREFIX}/containers-v2:{suffix}")
    name = f"homelab-test-v2-{suffix}"
    try:
        docker("run", "-d", "--name", name, "--memory", str(LIMIT), "--entrypoint", "/bin/sh", image, "-c",
               "while :; do i=0; while [ $i -lt 20000 ]; do i=$((i + 1)); done; sleep 0.2; done")  # fmt: skip
        cid = json.loads(docker("inspect", name).stdout)[0]["Id"]
        v2 = plugin.cgroup_dir(unified, "", cid)
        v1 = plugin.layout("/sys/fs/cgroup")
        assert v2 is not None and v1.version == 1, (v2, v1)
        cpuacct = plugin.cgroup_dir("/sys/fs/cgroup", v1.cpu, cid)
        assert cpuacct is not None
        present = sorted(p.name for p in v2.iterdir())
        assert "cpu.stat" in present and not {"memory.current", "memory.max", "memory.stat", "memory.events"} & set(
            present
        ), present
        time.sleep(2)  # some CPU time to compare
        before = int((cpuacct / "cpuacct.usage").read_text()) // 1000
        usage_usec = plugin._keyed((v2 / "cpu.stat").read_text())["usage_usec"]
        after = int((cpuacct / "cpuacct.usage").read_text()) // 1000
        assert 0 < before <= usage_usec <= after, (before, usage_usec, after)

        collectd = FakeCollectd()
        reader = plugin.Reader(collectd, cgroup_root=unified, containers_dir=_engine_containers_dir())
        reader.read()
        reader.read()
        assert collectd.errors == [
            f"containers: the cgroup v2 hierarchy under {unified} has no memory controller (its cgroup.controllers: "
            f"{Path(unified, 'cgroup.controllers').read_text().strip() or 'none'}), so no container's "
            "memory.current: mount the host's /sys/fs/cgroup itself there read-only"
        ]
        reader = plugin.Reader(collectd, cgroup_root="/sys/fs/cgroup", containers_dir=_engine_containers_dir())
        reader.read()
        assert collectd.dispatched[(name, "memory", "limit")] == LIMIT
    finally:
        docker("rm", "-f", name, check=False)
        docker("rmi", "-f", image, check=False)


def _engine_containers_dir() -> str:
    return docker("info", "--format", "{{.DockerRootDir}}").stdout.strip() + "/containers"
