"""Issue 20's proofs on the real engine, with the faithful stand-ins:
- `docker inspect` of every service shows the memory limit, reservation, pids limit, CPU weight, dropped
  and added capabilities, read-only root and tmpfs mounts the catalog declares (read from compose/*.yaml here, not
  through homelab), and the services turned healthy with them;
- each image started as root runs with exactly the capabilities its facts list and exits without any one
  of them (a stand-in that needs a dropped capability fails);
- a stand-in that grows past its memory limit is OOM-killed and restarted by its policy while the others
  stay healthy throughout, and `homelab status` (table and --json) shows the OOM kill and the restarts;
- a stand-in that forks without end stops at its pids limit while the others stay healthy and the host
  still forks and answers.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import yaml
from dockerlab import free_port, make_deployment, remove_homelab_resources, wait_for
from standins import IMAGE_PATH, PREFIX, Rootfs, add_debian_packages, docker, faithful_image, nginx_edge_image

from homelab.images.facts import all_facts

pytestmark = pytest.mark.docker

CATALOG = Path(__file__).resolve().parents[2] / "compose"
HOG_LIMIT = "64m"  # the runaway's limit in this test: small, so the host never feels it
FORK_LIMIT = 64


def _bytes(size: str) -> int:
    number, unit = re.fullmatch(r"(\d+)([kmg])", size.lower()).groups()  # type: ignore[union-attr]
    return int(number) * 1024 ** (1 + "kmg".index(unit))


def _declared() -> dict[str, dict]:
    """service -> its `resources` and `cap_drop` as compose/*.yaml states them."""
    out = {}
    for path in CATALOG.glob("*.yaml"):
        for name, spec in (yaml.safe_load(path.read_text()).get("services") or {}).items():
            out[name] = {
                "resources": spec["resources"],
                "cap_drop": spec.get("cap_drop"),
                "cap_add": spec.get("cap_add", []),
                "read_only": spec.get("read_only", False),
                "tmpfs": spec.get("tmpfs", []),
            }
    return out


@pytest.fixture(scope="module")
def lab(world, tmp_path_factory):  # type: ignore[no-untyped-def]
    apps = {
        "rstudio": {"resources": {"memory": HOG_LIMIT}},
        "gitea": {"ssh_port": free_port(), "resources": {"pids": FORK_LIMIT}},
    }
    deployment = make_deployment(tmp_path_factory.mktemp("resources"), world, apps)
    deployment.up("--timeout", "120")
    yield deployment
    remove_homelab_resources()


def _state(name: str) -> dict:
    return json.loads(docker("inspect", name).stdout)[0]["State"]


def _others_healthy(lab, skip: str) -> None:  # type: ignore[no-untyped-def]
    for service, container in lab.containers().items():
        if service != skip and container["Config"].get("Healthcheck"):
            assert container["State"]["Health"]["Status"] == "healthy", f"{service} left healthy"


def test_inspect_shows_the_declared_limits_and_capabilities(lab) -> None:  # type: ignore[no-untyped-def]
    declared = _declared()
    overrides = {"rstudio": {"memory": HOG_LIMIT, "reservation": HOG_LIMIT}, "gitea": {"pids": FORK_LIMIT}}
    containers = lab.containers()
    assert set(containers) == {"traefik", "socket-proxy", "gitea", "rstudio"}
    for service, container in containers.items():
        want = {**declared[service]["resources"], **overrides.get(service, {})}
        host = container["HostConfig"]
        assert host["Memory"] == _bytes(want["memory"]), service
        assert host["MemoryReservation"] == _bytes(want["reservation"]), service
        assert host["PidsLimit"] == want["pids"], service
        assert host["CpuShares"] == want["cpu_weight"], service
        assert (host["CapDrop"] or None) == declared[service]["cap_drop"], service
        assert sorted(c.removeprefix("CAP_") for c in host["CapAdd"] or []) == sorted(declared[service]["cap_add"])
        assert host["ReadonlyRootfs"] == declared[service]["read_only"], service
        assert sorted(host.get("Tmpfs") or {}) == sorted(declared[service]["tmpfs"]), service
        assert "no-new-privileges:true" in host["SecurityOpt"]
        assert container["State"]["Health"]["Status"] == "healthy", service


def test_a_runaway_is_oom_killed_and_restarted_while_the_others_stay_healthy(lab) -> None:  # type: ignore[no-untyped-def]
    name = "homelab-dev-rstudio-1"
    restarts = json.loads(docker("inspect", name).stdout)[0]["RestartCount"]
    since = str(int(time.time()) - 1)
    docker("exec", name, "/.standin/busybox", "touch", "/tmp/standin-hog")

    def restarted_and_healthy() -> bool:
        _others_healthy(lab, skip="rstudio")
        data = json.loads(docker("inspect", name).stdout)[0]
        return data["RestartCount"] > restarts and data["State"]["Health"]["Status"] == "healthy"

    wait_for(restarted_and_healthy, 120, "rstudio OOM-killed, restarted and healthy again", interval=0.5)
    events = docker(
        "events",
        "--since",
        since,
        "--until",
        str(int(time.time()) + 1),
        "--filter",
        f"container={name}",
        "--filter",
        "event=oom",
        "--format",
        "{{.Action}}",
    ).stdout.split()
    assert "oom" in events, events
    _others_healthy(lab, skip="")
    # `homelab status` reports it: the OOM kill, the restarts, the memory in use against the 64 MiB limit
    rows = {r["service"]: r for r in json.loads(lab.homelab("status", "--json", check=False).stdout)["services"]}
    rstudio = rows["rstudio"]
    assert rstudio["oom_killed"] is True and rstudio["restarts"] > restarts, rstudio
    assert rstudio["memory"].endswith(" MiB / 64 MiB"), rstudio
    assert rows["gitea"]["oom_killed"] is False and rows["gitea"]["memory"].endswith(" / 1024 MiB"), rows["gitea"]
    table = lab.homelab("status", check=False).stdout.splitlines()
    assert any(line.startswith("dev/rstudio ") and line.endswith("(OOM-killed)") for line in table), table


def test_a_fork_bomb_stops_at_the_pids_limit(lab) -> None:  # type: ignore[no-untyped-def]
    name = "homelab-dev-gitea-1"
    # every process forks a child and waits for it, forever: the tree stays at the limit (the stand-in's
    # main process forks nothing more, so the container stays up, like an app whose children fail)
    bomb = docker("exec", "-d", name, "/.standin/sh", "-c", "b() { while :; do b & wait; done; }; b", check=False)
    assert bomb.returncode == 0, bomb.stderr

    def at_limit() -> bool:
        _others_healthy(lab, skip="gitea")
        pids = int(docker("stats", "--no-stream", "--format", "{{.PIDs}}", name).stdout.strip() or 0)
        assert pids <= FORK_LIMIT
        return pids >= FORK_LIMIT - 2

    wait_for(at_limit, 120, f"gitea's processes to reach its pids limit {FORK_LIMIT}", interval=0.5)
    _others_healthy(lab, skip="gitea")
    # the host stays responsive with the bomb at its limit: it forks and runs programs at once (a
    # generous bound on this shared 2-core machine), and the edge still answers through the engine
    start = time.monotonic()
    for _ in range(20):
        subprocess.run(["true"], check=True)
    assert time.monotonic() - start < 10
    assert lab.homelab("status", "--json", check=False).returncode in (0, 1)
    docker("restart", "-t", "1", name)  # ends the bomb; the service comes back on its own
    wait_for(lambda: _state(name).get("Health", {}).get("Status") == "healthy", 120, "gitea after the restart")


# the images started as root whose capabilities are worked out (homelab/images/facts/*.yaml `capabilities`),
# by the service the `images` fixture builds their stand-in for (graphite's is built here: no test deploys it)
ROOT_IMAGES = {
    "db": "postgres:16.6-alpine",
    "redis": "redis:7.4.1-alpine",
    "nextcloud": "nextcloud:30.0.4-apache",
    "plex": "plexinc/pms-docker:1.41.3.9314-a0bfb8370",
    "graphite": "graphiteapp/graphite-statsd:1.1.10-5",
}
NEXTCLOUD_ENV = {"NEXTCLOUD_ADMIN_USER": "admin", "NEXTCLOUD_ADMIN_PASSWORD": "example", "POSTGRES_HOST": "db"}


@pytest.fixture(scope="module")
def root_images(images, tmp_path_factory) -> dict[str, str]:  # type: ignore[no-untyped-def]
    graphite = faithful_image(tmp_path_factory.mktemp("graphite"), all_facts()[ROOT_IMAGES["graphite"]])
    return {**images, "graphite": graphite}


@pytest.mark.parametrize("service", sorted(ROOT_IMAGES))
def test_a_root_image_runs_with_exactly_its_capabilities_and_not_one_less(root_images, service: str) -> None:  # type: ignore[no-untyped-def]
    """cap_drop ALL + cap_add the facts' list: the stand-in (which does, as root, what the entrypoint does
    with each capability: chown, write and chmod a file another uid owns, signal a process of the uid it
    drops to, switch its server to that uid) serves its health path; without any one of them it exits.
    Not shown failing: NET_BIND_SERVICE (Docker >= 20.10 lets any uid bind :80 in a container:
    ip_unprivileged_port_start)."""
    facts = all_facts()[ROOT_IMAGES[service]]
    caps = sorted(facts.capabilities or {})
    env = [arg for key, value in NEXTCLOUD_ENV.items() for arg in ("-e", f"{key}={value}")]
    for missing_cap in [c for c in caps if c != "NET_BIND_SERVICE"]:
        adds = [arg for c in caps if c != missing_cap for arg in ("--cap-add", c)]
        run = docker("run", "--rm", "--cap-drop", "ALL", *adds, *env, root_images[service], check=False, timeout=60)
        assert run.returncode != 0, f"{service} ran without CAP_{missing_cap}: {run}"
        assert f"needs CAP_{missing_cap}" in run.stderr or missing_cap in ("SETUID", "SETGID"), run.stderr
    name = f"homelab-test-caps-{uuid.uuid4().hex[:8]}"
    adds = [arg for c in caps for arg in ("--cap-add", c)]
    docker("run", "-d", "--name", name, "--cap-drop", "ALL", *adds, *env, root_images[service])
    try:
        health = facts.health
        url = f"http://127.0.0.1:{health.port}{health.path or '/'}"  # type: ignore[union-attr]
        probe = ["exec", name, "/.standin/busybox", "wget", "-q", "-O", "/dev/null", url]
        wait_for(lambda: docker(*probe, check=False).returncode == 0, 60, f"{service} with exactly {caps}")
        users = docker("exec", name, "/.standin/busybox", "ps", "-o", "user,args").stdout.splitlines()
        assert any(line.split()[0] == "app" and "httpd" in line for line in users), users  # as gosu/su-exec do
    finally:
        docker("rm", "-f", name, check=False)


# the REAL NGINX of the edge image (Debian's nginx-light, standins.nginx_edge_image from the Dockerfile homelab
# renders) with the privileged parts of our nginx.conf: root master on :80, `user www-data` workers, the
# temp paths NGINX was built with (nginx -V: /var/lib/nginx/*)
EDGE_NGINX_CONF = """user www-data;
pid /run/nginx.pid;
events {}
http {
    server { listen 80; location = /healthz { return 200 "ok\\n"; } }
}
"""
# what NGINX logs when it is refused each capability (src/core/ngx_file.c ngx_create_paths,
# src/os/unix/ngx_process_cycle.c ngx_worker_process_init)
EDGE_NGINX_REFUSED = {
    "CHOWN": 'chown("/var/lib/nginx/body", 33) failed (1: Operation not permitted)',
    "SETGID": "setgid(33) failed (1: Operation not permitted)",
    "SETUID": "setuid(33) failed (1: Operation not permitted)",
}


def _serves(name: str) -> bool:
    # GNU wget: one try, 3 s (a master without workers accepts the connection and never answers)
    url = "http://127.0.0.1/healthz"
    probe = docker("exec", name, "wget", "-q", "-T", "3", "-t", "1", "-O", "-", url, check=False, timeout=20)
    return probe.returncode == 0 and probe.stdout == "ok\n"


def _workers(name: str) -> set[tuple[str, str]]:
    """(uid, pid) of each NGINX worker, from the host's ps (the image has none)."""
    rows = docker("top", name, "-o", "uid,pid,args").stdout.splitlines()[1:]
    return {(row.split()[0], row.split()[1]) for row in rows if "nginx: worker process" in row}


def test_the_nginx_edge_runs_with_exactly_its_capabilities_and_not_one_less(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Without CHOWN, SETGID or SETUID the real NGINX serves nothing and logs the refused call; with exactly
    the facts' list its workers run as www-data, a reload replaces them and a stop ends it cleanly (the
    master reaches its workers over its channel: no KILL). NET_BIND_SERVICE is not shown failing (Docker
    >= 20.10 lets any uid bind :80 in a container)."""
    from homelab.render.templating import render_template

    facts = next(f for f in all_facts().values() if f.name == "nginx")
    caps = sorted(facts.capabilities or {})
    assert caps == ["CHOWN", "NET_BIND_SERVICE", "SETGID", "SETUID"], caps
    image = nginx_edge_image(tmp_path, render_template("nginx.Dockerfile.j2"), tag=f"{PREFIX}/nginx:caps")
    conf = tmp_path / "nginx.conf"
    conf.write_text(EDGE_NGINX_CONF)
    mount = ["-v", f"{conf}:/etc/nginx/nginx.conf:ro"]
    names = []

    def start(adds: list[str]) -> str:
        name = f"homelab-test-nginx-caps-{uuid.uuid4().hex[:8]}"
        names.append(name)
        docker(
            "run",
            "-d",
            "--name",
            name,
            "--cap-drop",
            "ALL",
            *(a for c in adds for a in ("--cap-add", c)),
            *mount,
            image,
        )
        return name

    try:
        for missing_cap, refused in EDGE_NGINX_REFUSED.items():
            name = start([c for c in caps if c != missing_cap])

            def refused_and_logged(name: str = name, refused: str = refused) -> bool:
                logs = docker("logs", name, check=False)
                return refused in logs.stdout + logs.stderr

            wait_for(refused_and_logged, 30, f"NGINX without CAP_{missing_cap} to log {refused}")
            assert not _serves(name), f"NGINX served without CAP_{missing_cap}"
        name = start(caps)
        wait_for(lambda: _serves(name), 30, f"NGINX with exactly {caps}")
        before = _workers(name)
        assert before and {uid for uid, _ in before} == {"33"}, before  # www-data
        docker("exec", name, "nginx", "-s", "reload")
        wait_for(lambda: _workers(name) and not _workers(name) & before, 30, "NGINX's workers replaced by a reload")
        assert {uid for uid, _ in _workers(name)} == {"33"} and _serves(name)
        began = time.monotonic()
        docker("stop", "-t", "20", name)
        assert time.monotonic() - began < 10, "NGINX needed the engine's SIGKILL to stop"
        assert _state(name)["ExitCode"] == 0, _state(name)
    finally:
        for name in names:
            docker("rm", "-f", name, check=False)
        docker("rmi", "-f", f"{PREFIX}/nginx:caps", check=False)


# the REAL collectd of our image (Debian's collectd-core, the package collectd.Dockerfile.j2 installs, with
# libatasmart for the smart plugin) with the privileged parts of our collectd.conf: an exec program run as
# nobody (our backup-status and cert-expiry programs) and the smart plugin. The probe program reports a
# value every second and, on collectd's SIGTERM at shutdown, leaves a mark in /tmp.
COLLECTD_CONF = """Hostname "capstest"
FQDNLookup false
Interval 1
LoadPlugin logfile
<Plugin logfile>
  LogLevel info
  File STDOUT
</Plugin>
LoadPlugin unixsock
<Plugin unixsock>
  SocketFile "/run/collectd.sock"
</Plugin>
LoadPlugin smart
LoadPlugin exec
<Plugin exec>
  Exec "nobody" "/usr/bin/dash" "/etc/collectd/probe.sh"
</Plugin>
"""
COLLECTD_PROBE = """trap 'echo stopped > /tmp/probe-stopped; exit 0' TERM
while :; do echo "PUTVAL capstest/exec-probe/gauge-up interval=1 N:1"; sleep 1 & wait $!; done
"""
PROBE_VALUE = "capstest/exec-probe/gauge-up"


def _collectd_image(workdir: Path) -> str:
    root = Rootfs(workdir / "collectd.tar")
    add_debian_packages(root, ("dash", "coreutils", "collectd-core", "collectd-utils", "libatasmart4"))
    root.dir("run")
    return root.import_as(f"{PREFIX}/collectd:caps", f"ENV PATH={IMAGE_PATH}")


def test_collectd_runs_with_exactly_its_capabilities_and_not_one_less(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Without SETGID or SETUID the exec program never runs as nobody (collectd logs the refused call and
    its value never arrives); without KILL collectd cannot stop it (no SIGTERM reaches it); without
    SYS_RAWIO collectd itself says the smart plugin will fail. With exactly the facts' list: the value
    arrives from a process of uid 65534, collectd's SIGTERM reaches it at stop, and smart does not warn."""
    facts = next(f for f in all_facts().values() if f.name == "collectd")
    caps = sorted(facts.capabilities or {})
    assert caps == ["KILL", "SETGID", "SETUID", "SYS_RAWIO"], caps
    image = _collectd_image(tmp_path)
    (tmp_path / "collectd.conf").write_text(COLLECTD_CONF)
    (tmp_path / "probe.sh").write_text(COLLECTD_PROBE)
    mounts = ["-v", f"{tmp_path / 'collectd.conf'}:/etc/collectd/collectd.conf:ro"]
    mounts += ["-v", f"{tmp_path / 'probe.sh'}:/etc/collectd/probe.sh:ro"]
    # collectd under a shell that outlives it: after collectd's shutdown its exec program is still there to
    # look at, unless collectd's SIGTERM reached it (as PID 1, collectd's exit would take it along at once)
    command = [
        "dash",
        "-c",
        "collectd -f -C /etc/collectd/collectd.conf & echo $! > /run/collectd.pid; wait; sleep 600",
    ]
    names: list[str] = []

    def run(adds: list[str]) -> str:
        name = f"homelab-test-collectd-caps-{uuid.uuid4().hex[:8]}"
        names.append(name)
        cap_args = [a for c in adds for a in ("--cap-add", c)]
        docker("run", "-d", "--name", name, "--cap-drop", "ALL", *cap_args, *mounts, image, *command)
        return name

    def logs(name: str) -> str:
        out = docker("logs", name, check=False)
        return out.stdout + out.stderr

    def has_value(name: str) -> bool:
        listed = docker("exec", name, "collectdctl", "-s", "/run/collectd.sock", "listval", check=False)
        return PROBE_VALUE in listed.stdout

    def stop_collectd(name: str) -> None:
        docker("exec", name, "dash", "-c", 'kill -TERM "$(cat /run/collectd.pid)"')
        gone = ["exec", name, "dash", "-c", '! kill -0 "$(cat /run/collectd.pid)" 2>/dev/null']
        wait_for(lambda: docker(*gone, check=False).returncode == 0, 30, "collectd to shut down")

    def probe_stopped(name: str) -> bool:  # the program's TERM trap ran
        return docker("exec", name, "test", "-e", "/tmp/probe-stopped", check=False).returncode == 0

    def probe_running(name: str) -> bool:
        return any("probe.sh" in row for row in docker("top", name, "-o", "pid,args").stdout.splitlines())

    rawio_warning = "Running collectd as root, but the CAP_SYS_RAWIO capability is missing"
    try:
        for missing_cap, refused in (("SETGID", "setgid (65534) failed"), ("SETUID", "setuid (65534) failed")):
            name = run([c for c in caps if c != missing_cap])
            wait_for(lambda name=name, refused=refused: refused in logs(name), 30, f"collectd to log {refused}")
            assert not has_value(name), f"the exec program ran without CAP_{missing_cap}"
        name = run([c for c in caps if c != "KILL"])
        wait_for(lambda: has_value(name), 30, "the exec program's value without KILL")
        stop_collectd(name)
        time.sleep(2)  # what the trap would need, many times over
        assert not probe_stopped(name) and probe_running(name), "collectd's SIGTERM reached it without CAP_KILL"
        name = run([c for c in caps if c != "SYS_RAWIO"])
        wait_for(lambda: rawio_warning in logs(name), 30, "collectd to say smart needs CAP_SYS_RAWIO")
        name = run(caps)
        wait_for(lambda: has_value(name), 30, f"the exec program's value with exactly {caps}")
        rows = docker("top", name, "-o", "uid,pid,args").stdout.splitlines()
        assert any(row.split()[0] == "65534" and "probe.sh" in row for row in rows), rows
        assert rawio_warning not in logs(name)
        stop_collectd(name)
        wait_for(lambda: probe_stopped(name), 10, "collectd's SIGTERM to reach its exec program")
        assert not probe_running(name)
    finally:
        for name in names:
            docker("rm", "-f", name, check=False)
        docker("rmi", "-f", f"{PREFIX}/collectd:caps", check=False)
