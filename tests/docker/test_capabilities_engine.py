"""Issue 20's capability proofs on the REAL programs of the images homelab builds itself (the NGINX edge
from Debian's nginx-light, collectd from Debian's collectd-core): with exactly the capabilities their
facts list (homelab/images/facts/nginx.yaml, collectd.yaml) they do their privileged work, and without
any one of them that work visibly fails. The root images of other projects are proven with their faithful
stand-ins in test_resources_engine.py."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pytest
from dockerlab import wait_for
from standins import IMAGE_PATH, PREFIX, Rootfs, add_debian_packages, docker, nginx_edge_image

from homelab.images.facts import all_facts

pytestmark = pytest.mark.docker


def _state(name: str) -> dict:
    return json.loads(docker("inspect", name).stdout)[0]["State"]


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
    """Without SETGID or SETUID the exec program never runs as nobody (collectd warns at start and the
    value never arrives); without KILL collectd cannot stop it (no SIGTERM reaches it); without
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

    # what collectd itself says at start when a capability its plugin needs is missing (smart.c:650,
    # exec.c:810): deterministic, unlike the exec child's own "setuid (65534) failed", which it logs after
    # fork() in a threaded process and so may never get out
    rawio_warning = "Running collectd as root, but the CAP_SYS_RAWIO capability is missing"
    setid_warning = "Running collectd as root, but the CAP_SETUID or CAP_SETGID capabilities are missing"
    try:
        began = time.monotonic()
        name = run(caps)
        wait_for(lambda: has_value(name), 30, f"the exec program's value with exactly {caps}")
        arrives = time.monotonic() - began
        rows = docker("top", name, "-o", "uid,pid,args").stdout.splitlines()
        assert any(row.split()[0] == "65534" and "probe.sh" in row for row in rows), rows
        assert rawio_warning not in logs(name) and setid_warning not in logs(name)
        stop_collectd(name)
        wait_for(lambda: probe_stopped(name), 10, "collectd's SIGTERM to reach its exec program")
        assert not probe_running(name)
        for missing_cap in ("SETGID", "SETUID"):
            name = run([c for c in caps if c != missing_cap])
            wait_for(lambda name=name: setid_warning in logs(name), 30, f"collectd to warn without {missing_cap}")
            time.sleep(max(5.0, 3 * arrives))  # three times what the value took with every capability
            assert not has_value(name) and not probe_running(name), f"the program ran without CAP_{missing_cap}"
        name = run([c for c in caps if c != "KILL"])
        wait_for(lambda: has_value(name), 30, "the exec program's value without KILL")
        stop_collectd(name)
        time.sleep(2)  # what the trap would need, many times over
        assert not probe_stopped(name) and probe_running(name), "collectd's SIGTERM reached it without CAP_KILL"
        name = run([c for c in caps if c != "SYS_RAWIO"])
        wait_for(lambda: rawio_warning in logs(name), 30, "collectd to say smart needs CAP_SYS_RAWIO")
    finally:
        for name in names:
            docker("rm", "-f", name, check=False)
        docker("rmi", "-f", f"{PREFIX}/collectd:caps", check=False)
