"""A three-node Docker Swarm on this one machine, for the tests (recipe: shared docs real-components.md).

Each node is a `dockerd` of its own (data root, exec root, socket /run/hl3n/<node>.sock, cgroup parent)
started in a network namespace of its own plus a private mount and UTS namespace (its own hostname, a
sysfs of its network namespace, the host's cgroup hierarchies kept). The nodes' namespaces are joined by
veth pairs to a bridge that lives in a namespace of its own (hl3n-br, 10.213.0.1), so the host's links,
routes, iptables and its own Docker Engine stay untouched. Inside a node's mount namespace its socket is
bound over /run/docker.sock, so a container mounting the Docker socket reaches its own node's engine.

The nodes share the host's files. A node's "local disk" is a folder of the rig bound over a path in that
node's mount namespace only (`local_disk`): what a node's task writes there is not seen by the others.
Pebble (the ACME test CA) and its DNS run in the bridge's namespace; every name resolves to the edge
node. Nothing here needs a registry, nor the host's engine: the images are imported straight into
the nodes' engines (`build_images`). `close` stops every process it started (by the pid it recorded) and removes every
namespace, mount and folder it made, also after a failed start.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import standins

from homelab.images.check import pinned_images
from homelab.images.facts import all_facts
from tests.conftest import find_program

PREFIX = "hl3n"
BRIDGE_NS = f"{PREFIX}-br"
RUN = Path("/run") / PREFIX
SUBNET = "10.213.0"
GATEWAY = f"{SUBNET}.1"  # the bridge's address: Pebble's
PEBBLE_API, PEBBLE_MGMT, DNS_PORT = 14000, 15000, 8053
# the ports the edge publishes on its node, which Pebble validates on (its httpPort / tlsPort)
HTTP_PORT, HTTPS_PORT = 5002, 5001

# node, role in the tests, last byte of its address
NODES = (("hl3n-mgr", "manager", 11), ("hl3n-edge", "edge", 12), ("hl3n-w", "worker", 13))

NODE_SCRIPT = """#!/bin/sh
# in the node's own network, mount and UTS namespaces: $1 node name, $2 its config file, $3 data root
set -e
hostname "$1"
cg=$(mktemp -d)
mount --rbind /sys/fs/cgroup "$cg"
mount -t sysfs sysfs /sys
mount --move "$cg" /sys/fs/cgroup
rmdir "$cg"
dockerd --config-file "$2" --data-root "$3" --exec-root "/run/hl3n/$1" --pidfile "/run/hl3n/$1.pid" \\
    -H "unix:///run/hl3n/$1.sock" > "$3.log" 2>&1 &
i=0; while [ ! -S "/run/hl3n/$1.sock" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
mount --bind "/run/hl3n/$1.sock" /run/docker.sock
wait
"""


def run(argv: list[str], *, check: bool = True, timeout: float = 120, **kwargs) -> subprocess.CompletedProcess[str]:  # type: ignore[no-untyped-def]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False, **kwargs)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def in_ns(ns: str, *argv: str) -> list[str]:
    return ["ip", "netns", "exec", ns, *argv]


@dataclass
class Node:
    name: str
    role: str
    address: str
    base: Path
    script: subprocess.Popen[bytes] | None = None
    disks: list[tuple[Path, Path]] = field(default_factory=list)  # (the node's folder, bound over this path)

    @property
    def host(self) -> str:
        return f"unix://{RUN}/{self.name}.sock"

    @property
    def data_root(self) -> Path:
        return self.base / self.name

    def dockerd_pid(self) -> int | None:
        try:
            return int((RUN / f"{self.name}.pid").read_text())
        except (OSError, ValueError):
            return None

    def mount_ns(self) -> list[str]:
        """argv prefix running a program in the node's mount namespace (its local disks, its sysfs)."""
        assert self.script is not None
        return ["nsenter", f"--mount=/proc/{self.script.pid}/ns/mnt", "--"]


class Rig:
    def __init__(self, base: Path) -> None:
        self.base = base
        self.nodes = {role: Node(name, role, f"{SUBNET}.{last}", base) for name, role, last in NODES}
        self.processes: list[subprocess.Popen[bytes]] = []  # Pebble and its DNS
        self.pebble_log = base / "pebble" / "pebble.log"
        self.pebble_pem = base / "pebble" / "pebble.pem"
        self.root_pem = ""

    # --- docker against one node -------------------------------------------------------------------

    def docker(
        self, role: str, *args: str, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        return run(["docker", "-H", self.nodes[role].host, *args], check=check, timeout=timeout)

    @property
    def manager(self) -> Node:
        return self.nodes["manager"]

    def on_manager(self) -> list[str]:
        """argv prefix: a program run where homelab runs, on the manager (its network)."""
        return ["nsenter", f"--net=/run/netns/{self.manager.name}", "--"]

    # --- start ---------------------------------------------------------------------------------------

    def start(self) -> None:
        self.base.mkdir(parents=True, exist_ok=True)
        RUN.mkdir(exist_ok=True)
        (self.base / "node.sh").write_text(NODE_SCRIPT)
        (self.base / "node.sh").chmod(0o755)
        self._network()
        for node in self.nodes.values():
            config = {
                "storage-driver": "overlay2",
                "log-driver": "json-file",
                "cgroup-parent": f"/{node.name}",
                "bip": f"172.27.{node.address.rsplit('.', 1)[1]}.1/24",
                "default-address-pools": [{"base": "172.28.0.0/16", "size": 24}],
            }
            (self.base / f"{node.name}.json").write_text(json.dumps(config))
            self.start_engine(node.role)
        manager = self.manager
        # a node whose engine stopped is seen down after a few heartbeats: 2 s ones, not the default 5 s
        self.docker("manager", "swarm", "init", "--advertise-addr", manager.address, "--dispatcher-heartbeat", "2s")
        token = self.docker("manager", "swarm", "join-token", "-q", "worker").stdout.strip()
        for role in ("edge", "worker"):
            self.docker(role, "swarm", "join", "--token", token, "--advertise-addr", self.nodes[role].address,
                        f"{manager.address}:2377")  # fmt: skip
        self.docker("manager", "node", "update", "--label-add", "homelab.storage=true", manager.name)
        self.docker("manager", "node", "update", "--label-add", "homelab.edge=true", self.nodes["edge"].name)
        self.wait_node("edge", "ready")
        self.wait_node("worker", "ready")
        self._pebble()

    def _network(self) -> None:
        run(["ip", "netns", "add", BRIDGE_NS])
        br = ["ip", "netns", "exec", BRIDGE_NS, "ip"]
        run([*br, "link", "add", "br0", "type", "bridge"])
        run([*br, "addr", "add", f"{GATEWAY}/24", "dev", "br0"])
        run([*br, "link", "set", "br0", "up"])
        run([*br, "link", "set", "lo", "up"])
        for node in self.nodes.values():
            run(["ip", "netns", "add", node.name])
            veth = f"{node.name}-v"
            run(
                [
                    "ip",
                    "link",
                    "add",
                    veth,
                    "netns",
                    BRIDGE_NS,
                    "type",
                    "veth",
                    "peer",
                    "name",
                    "eth0",
                    "netns",
                    node.name,
                ]
            )
            run([*br, "link", "set", veth, "master", "br0", "up"])
            ip = ["ip", "netns", "exec", node.name, "ip"]
            run([*ip, "addr", "add", f"{node.address}/24", "dev", "eth0"])
            run([*ip, "link", "set", "eth0", "up"])
            run([*ip, "link", "set", "lo", "up"])
            # no default route: the engines' registry lookups (a pull before each task starts, even of an
            # image the node has) fail at once instead of waiting ~20 s for a DNS server they cannot reach

    def start_engine(self, role: str) -> None:
        """The node's dockerd in fresh mount and UTS namespaces (its network namespace stays), its local
        disks bound again; returns once it answers."""
        node = self.nodes[role]
        with (self.base / f"{node.name}.script.log").open("ab") as log:
            node.script = subprocess.Popen(
                ["nsenter", f"--net=/run/netns/{node.name}", "--", "unshare", "--mount", "--uts",
                 "--propagation", "slave", "--", str(self.base / "node.sh"), node.name,
                 str(self.base / f"{node.name}.json"), str(node.data_root)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + 60
        while self.docker(role, "version", check=False, timeout=10).returncode != 0:
            if node.script.poll() is not None or time.monotonic() > deadline:
                log_text = Path(f"{node.data_root}.log").read_text(errors="replace")[-3000:]
                raise RuntimeError(f"dockerd of {node.name} did not start\n{log_text}")
            time.sleep(0.2)
        for folder, path in node.disks:
            self._bind(node, folder, path)

    def stop_engine(self, role: str, timeout: float = 60) -> None:
        """The node's dockerd stopped (SIGTERM, then SIGKILL), and the script that started it gone."""
        node = self.nodes[role]
        pid = node.dockerd_pid()
        if pid is not None:
            _signal(pid, signal.SIGTERM)
        if node.script is not None:
            try:
                node.script.wait(timeout)
            except subprocess.TimeoutExpired:
                if pid is not None:
                    _signal(pid, signal.SIGKILL)
                _signal(-node.script.pid, signal.SIGKILL)  # its own session (start_new_session)
                node.script.wait(30)
        (RUN / f"{node.name}.pid").unlink(missing_ok=True)
        (RUN / f"{node.name}.sock").unlink(missing_ok=True)

    def wait_node(self, role: str, state: str, timeout: float = 60) -> None:
        """Until the manager sees the node in `state` (ready | down)."""
        name, deadline = self.nodes[role].name, time.monotonic() + timeout
        while True:
            found = self.docker("manager", "node", "inspect", name, "--format", "{{.Status.State}}", check=False)
            if found.stdout.strip() == state:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"node {name} not {state} after {timeout}s ({found.stdout.strip()})")
            time.sleep(0.5)

    # --- files ---------------------------------------------------------------------------------------

    def local_disk(self, role: str, path: Path) -> Path:
        """The node's own folder, bound over `path` in its mount namespace (now and after a restart);
        returns that folder as the host sees it."""
        node = self.nodes[role]
        folder = self.base / "disks" / node.name / str(path).strip("/").replace("/", "_")
        folder.mkdir(parents=True, exist_ok=True)
        path.mkdir(parents=True, exist_ok=True)  # the mount point
        node.disks.append((folder, path))
        self._bind(node, folder, path)
        return folder

    def _bind(self, node: Node, folder: Path, path: Path) -> None:
        run([*node.mount_ns(), "mount", "--bind", str(folder), str(path)])

    def read_only(self, role: str, path: Path, read_only: bool) -> None:
        """The node's local disk at `path` made read-only (or writable again), in its namespace only."""
        node = self.nodes[role]
        run([*node.mount_ns(), "mount", "-o", f"remount,bind,{'ro' if read_only else 'rw'}", str(path)])

    # --- images and the CA ---------------------------------------------------------------------------

    def build_images(self, work: Path, traefik_binary: str) -> dict[str, str]:
        """The edge's images (real Traefik trusting this rig's Pebble, the socket proxy) and Gitea's
        stand-in (tests/docker/standins.py), imported straight into the nodes that run them: Traefik on
        the manager too (the nodes' one-shot jobs run the edge's image), the rest on the manager."""
        both, manager = (self.manager.host, self.nodes["edge"].host), (self.manager.host,)
        gitea = all_facts()[pinned_images()["gitea"]]
        with ThreadPoolExecutor(3) as pool:
            traefik = pool.submit(standins.traefik_image, work, traefik_binary, self.pebble_pem, both)
            proxy = pool.submit(standins.socket_proxy_image, work, manager)
            app = pool.submit(standins.faithful_image, work, gitea, engines=manager)
            return {"traefik": traefik.result(), "socket-proxy": proxy.result(), "gitea": app.result()}

    def _pebble(self) -> None:
        """Pebble and its DNS (every name: the edge node) on the bridge, trusted by a certificate of its own."""
        work = self.pebble_log.parent
        work.mkdir(exist_ok=True)
        run(["openssl", "req", "-x509", "-nodes", "-days", "30", "-newkey", "ec", "-pkeyopt",
             "ec_paramgen_curve:P-256", "-subj", "/CN=pebble", "-addext", f"subjectAltName=IP:{GATEWAY}",
             "-keyout", str(work / "pebble.key"), "-out", str(self.pebble_pem)])  # fmt: skip
        self.pebble_pem.chmod(0o644)
        config = {
            "listenAddress": f"{GATEWAY}:{PEBBLE_API}",
            "managementListenAddress": f"{GATEWAY}:{PEBBLE_MGMT}",
            "certificate": str(self.pebble_pem),
            "privateKey": str(work / "pebble.key"),
            "httpPort": HTTP_PORT,
            "tlsPort": HTTPS_PORT,
            "ocspResponderURL": "",
            "externalAccountBindingRequired": False,
        }
        (work / "pebble.json").write_text(json.dumps({"pebble": config}))
        dns = [find_program("pebble-challtestsrv"), "-defaultIPv4", self.nodes["edge"].address, "-defaultIPv6", "",
               "-dns01", f"{GATEWAY}:{DNS_PORT}", "-http01", "", "-https01", "", "-tlsalpn01", "",
               "-management", f"{GATEWAY}:8055"]  # fmt: skip
        self.processes.append(
            subprocess.Popen(in_ns(BRIDGE_NS, *dns), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # type: ignore[arg-type]
        )
        env = {**os.environ, "PEBBLE_VA_NOSLEEP": "1", "PEBBLE_WFE_NONCEREJECT": "0", "PEBBLE_AUTHZREUSE": "0"}
        ca = [find_program("pebble"), "-config", str(work / "pebble.json"), "-dnsserver", f"{GATEWAY}:{DNS_PORT}"]
        with self.pebble_log.open("w") as log:
            self.processes.append(
                subprocess.Popen(in_ns(BRIDGE_NS, *ca), stdout=log, stderr=subprocess.STDOUT, env=env)
            )  # type: ignore[arg-type]
        fetch = (
            "import ssl,sys,urllib.request;c=ssl.create_default_context(cafile=sys.argv[1]);"
            "print(urllib.request.urlopen(sys.argv[2],context=c,timeout=2).read().decode(),end='')"
        )
        url = f"https://{GATEWAY}:{PEBBLE_MGMT}/roots/0"
        for _ in range(100):
            got = run(in_ns(BRIDGE_NS, sys.executable, "-c", fetch, str(self.pebble_pem), url), check=False)
            if got.returncode == 0:
                self.root_pem = got.stdout
                return
            time.sleep(0.2)
        raise RuntimeError(f"pebble did not start: {self.pebble_log.read_text()}")

    @property
    def acme_directory(self) -> str:
        return f"https://{GATEWAY}:{PEBBLE_API}/dir"

    # --- the end -------------------------------------------------------------------------------------

    def close(self) -> list[str]:
        """Stop everything started, remove every namespace and folder; returns what had to be forced."""
        forced = []
        for proc in self.processes:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        for node in self.nodes.values():  # all at once: a manager takes ~15 s to stop
            pid = node.dockerd_pid()
            if pid is not None:
                _signal(pid, signal.SIGTERM)
        for node in self.nodes.values():
            self.stop_engine(node.role)
        forced += kill_leftovers()
        for node in self.nodes.values():  # the engines' data: hundreds of MB of image layers
            run(["rm", "-rf", str(node.data_root), str(self.base / "disks")])
        return forced


def _signal(pid: int, sig: signal.Signals) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _cgroups() -> list[Path]:
    """The cgroups the nodes' engines made for their containers (cgroup-parent /hl3n-<node>)."""
    return [d for h in Path("/sys/fs/cgroup").iterdir() if h.is_dir() for d in h.glob(f"{PREFIX}-*")]


def kill_leftovers() -> list[str]:
    """What a rig left (this run's, or a killed run's: under the rig's lock nobody else uses these names):
    processes in its namespaces or cgroups, the namespaces, the cgroups, /run/hl3n. Returns what it found."""
    found = []
    names = [BRIDGE_NS, *(name for name, _, _ in NODES)]
    pids = set()
    for ns in names:
        if Path(f"/run/netns/{ns}").exists():
            pids |= {int(p) for p in run(["ip", "netns", "pids", ns], check=False).stdout.split()}
    for group in _cgroups():
        for procs in group.rglob("cgroup.procs"):
            pids |= {int(p) for p in procs.read_text().split()}
    for pid in sorted(pids):
        found.append(f"process {pid}")
        _signal(pid, signal.SIGKILL)
    time.sleep(0.5 if pids else 0)
    for ns in names:
        if Path(f"/run/netns/{ns}").exists():
            run(["ip", "netns", "del", ns], check=False)
    for group in _cgroups():
        for sub in sorted((d for d in group.rglob("*") if d.is_dir()), key=lambda d: -len(d.parts)):
            sub.rmdir()
        group.rmdir()
    if RUN.exists():
        run(["rm", "-rf", str(RUN)])
    return found


def host_untouched() -> dict[str, object]:
    """What the rig must leave as it found it on the host: its engine out of the rig's swarm (other test
    sessions may put it in a swarm of its own meanwhile), and no namespace, link, mount, cgroup or run
    folder of the rig's."""
    swarm = run(["docker", "info", "--format", "{{json .Swarm}}"]).stdout
    links = run(["ip", "-o", "link"]).stdout
    mounts = Path("/proc/self/mountinfo").read_text()
    netns = sorted(p.name for p in Path("/run/netns").glob(f"{PREFIX}-*")) if Path("/run/netns").exists() else []
    return {
        "host engine in the rig's swarm": f"{SUBNET}." in swarm,
        "netns": netns,
        "links": [line for line in links.splitlines() if PREFIX in line],
        "mounts": [line for line in mounts.splitlines() if PREFIX in line],
        "cgroups": [str(c) for c in _cgroups()],
        "run": RUN.exists(),
    }
