"""Shared machinery for the edge contract tests: the example plan (optionally tweaked), test
certificates, local HTTP backends, a Traefik-label -> file-provider converter, the real Traefik and
NGINX processes on loopback, and a TLS/HTTP client that sets SNI and Host independently.

Everything lives under a temporary folder, listens on 127.0.0.1 on ports the OS hands out, and every
process is killed when its context manager exits. No mocks: these drive the real programs.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import http.client
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from homelab.config.loader import load
from homelab.plan import build_plan
from homelab.plan_model import Plan
from tests.conftest import EXAMPLE, EXAMPLE_SECRETS, find_program, missing, write_secret

WAIT_SECONDS = 15.0


# --- programs ------------------------------------------------------------------------------------


def program(name: str) -> str:
    """The path of a real program; skip on a laptop, fail in CI when it is missing (conftest's rule,
    usable from module-scoped fixtures)."""
    path = find_program(name)
    if path is None:
        missing(f"program {name!r}")
    assert path is not None
    return path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --- the example plan ----------------------------------------------------------------------------


def example_plan(folder: Path, **edge: Any) -> Plan:
    """Copy the bundled example (with its secret files) into `folder`, override `edge.*` keys (and
    switch the ACME challenge to http for the nginx edge, as the loader demands), load it, plan it."""
    folder.mkdir(parents=True, exist_ok=True)
    data = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    data["edge"].update(edge)
    if data["edge"].get("kind") == "nginx":
        data["domain"]["acme"]["challenge"] = "http"
    (folder / "homelab.yaml").write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    for name in EXAMPLE_SECRETS:
        write_secret(folder / "secrets" / name, f"example-{name}-value")
    return build_plan(load(folder / "homelab.yaml"))


# --- certificates --------------------------------------------------------------------------------


@dataclass
class LocalCA:
    """A throwaway CA and one EC P-256 leaf per host name: what Let's Encrypt would hand out
    (ECDSA P-256, SHA-256, 90 days: inside Mozilla intermediate's 366-day maximum)."""

    folder: Path
    ca_file: Path = field(init=False)
    _ca_key: ec.EllipticCurvePrivateKey = field(init=False)
    _ca_cert: x509.Certificate = field(init=False)

    def __post_init__(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        self._ca_key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "homelab contract test CA")])
        now = dt.datetime.now(dt.UTC)
        self._ca_cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self._ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(hours=1))
            .not_valid_after(now + dt.timedelta(days=90))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
            .sign(self._ca_key, hashes.SHA256())
        )
        self.ca_file = self.folder / "ca.pem"
        self.ca_file.write_bytes(self._ca_cert.public_bytes(serialization.Encoding.PEM))

    def leaf(self, host: str) -> tuple[Path, Path]:
        """(fullchain.pem, privkey.pem) in `folder/<host>/`, the layout of certbot's live/ folder."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)]))
            .issuer_name(self._ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(hours=1))
            .not_valid_after(now + dt.timedelta(days=90))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(host)]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(True, False, False, False, False, False, False, False, False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(self._ca_key, hashes.SHA256())
        )
        folder = self.folder / host
        folder.mkdir(exist_ok=True)
        fullchain, privkey = folder / "fullchain.pem", folder / "privkey.pem"
        fullchain.write_bytes(
            cert.public_bytes(serialization.Encoding.PEM) + self._ca_cert.public_bytes(serialization.Encoding.PEM)
        )
        privkey.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
        privkey.chmod(0o600)
        return fullchain, privkey


# --- backends ------------------------------------------------------------------------------------


class _Backend(BaseHTTPRequestHandler):
    """Answers every request with `<app> <METHOD> <path> <bytes received> <X-Forwarded-Proto>`, keeps
    connections alive (HTTP/1.1) and names the client port it saw in X-Backend-Peer. A websocket
    handshake gets 101, then every chunk read is echoed back as `<app>:<chunk>`."""

    app = "?"
    protocol_version = "HTTP/1.1"

    def _answer(self) -> None:
        if self.headers.get("Upgrade", "").lower() == "websocket":
            self._echo()
            return
        length = int(self.headers.get("Content-Length") or 0)
        received = 0
        while received < length:
            chunk = self.rfile.read(min(1 << 20, length - received))
            if not chunk:
                break
            received += len(chunk)
        body = f"{self.app} {self.command} {self.path} {received} {self.headers.get('X-Forwarded-Proto')}\n"
        data = body.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("X-Backend-Saw", ",".join(self.headers.keys()))
        self.send_header("X-Backend-Peer", str(self.connection.getpeername()[1]))
        identity = {k: v for k, v in self.headers.items() if k.lower().startswith("remote-")}
        self.send_header("X-Backend-Identity", json.dumps(identity, sort_keys=True))
        self.end_headers()
        self.wfile.write(data)

    def _echo(self) -> None:
        self.send_response(101)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.end_headers()
        self.wfile.flush()
        self.close_connection = True
        while chunk := self.rfile.read1(65536):
            self.wfile.write(f"{self.app}:".encode() + chunk)
            self.wfile.flush()

    do_GET = do_POST = do_PUT = _answer

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextlib.contextmanager
def backends(apps: list[str]) -> Iterator[dict[str, int]]:
    """One local HTTP server per app on 127.0.0.1: {app: port}."""
    servers: dict[str, ThreadingHTTPServer] = {}
    try:
        for app in apps:
            handler = type(f"Backend_{app}", (_Backend,), {"app": app})
            server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
            server.daemon_threads = True
            server.block_on_close = False  # never wait for a client the edge left hanging
            threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
            servers[app] = server
        yield {app: int(server.server_address[1]) for app, server in servers.items()}
    finally:
        stoppers = [threading.Thread(target=server.shutdown) for server in servers.values()]
        for stopper in stoppers:
            stopper.start()
        for stopper in stoppers:
            stopper.join(timeout=5)
        for server in servers.values():
            server.server_close()


# --- client --------------------------------------------------------------------------------------


@dataclass
class Response:
    status: int
    headers: http.client.HTTPMessage
    body: str


def client_context(ca_file: Path) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(ca_file))
    return context


def https(
    port: int,
    host: str,
    path: str = "/",
    *,
    ca_file: Path,
    sni: str | None = None,
    method: str = "GET",
    body: bytes | Iterator[bytes] | None = None,
    headers: Mapping[str, str] | None = None,
    timeout: float = 10.0,
) -> Response:
    """An HTTPS request to 127.0.0.1:port with SNI `sni` (default `host`) and `Host: host`,
    verifying the certificate against the test CA (so the right certificate must be served)."""
    raw = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        tls = client_context(ca_file).wrap_socket(raw, server_hostname=sni or host)
    except BaseException:
        raw.close()
        raise
    connection = http.client.HTTPConnection(host, port, timeout=timeout)
    connection.sock = tls
    try:
        all_headers = {"Host": host, **(headers or {})}
        if body is not None and not isinstance(body, bytes) and "Content-Length" not in all_headers:
            raise ValueError("streamed bodies need a Content-Length")
        connection.request(method, path, body=body, headers=all_headers)
        response = connection.getresponse()
        return Response(response.status, response.headers, response.read().decode(errors="replace"))
    finally:
        connection.close()


def http_plain(port: int, host: str, path: str = "/", timeout: float = 10.0) -> Response:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request("GET", path, headers={"Host": host})
        response = connection.getresponse()
        return Response(response.status, response.headers, response.read().decode(errors="replace"))
    finally:
        connection.close()


def tls_handshake_error(port: int, sni: str, ca_file: Path) -> ssl.SSLError | None:
    """None when a TLS handshake with this SNI succeeds, else the error the server caused."""
    context = client_context(ca_file)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # we only want to know whether the server completes it
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        try:
            with context.wrap_socket(raw, server_hostname=sni):
                return None
        except ssl.SSLError as exc:
            return exc


def wait_until(
    check: Callable[[], bool],
    what: str,
    process: subprocess.Popen[bytes] | None = None,
    log: Path | None = None,
    timeout: float = WAIT_SECONDS,
) -> None:
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            break
        try:
            if check():
                return
        except (OSError, ssl.SSLError, http.client.HTTPException) as exc:
            last = exc
        time.sleep(0.1)
    detail = log.read_text(errors="replace")[-4000:] if log and log.exists() else ""
    state = f"exited with {process.returncode}" if process is not None and process.poll() is not None else "running"
    raise AssertionError(f"timed out waiting for {what} (process {state}; last error {last!r})\n{detail}")


@contextlib.contextmanager
def running(
    argv: list[str], log: Path, cwd: Path, env: Mapping[str, str] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """A real process in its own process group, output to `log`, killed (group-wide) on exit."""
    with log.open("wb") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=cwd, start_new_session=True, env=env)
    try:
        yield process
    finally:
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=0.5)  # Traefik would wait up to 10 s for clients to leave
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=5)


# --- Traefik -------------------------------------------------------------------------------------

# Docker-label keys (Traefik matches them case-insensitively) -> the file provider's spelling.
_LABEL_KEYS = {
    "entrypoints": "entryPoints",
    "certresolver": "certResolver",
    "loadbalancer": "loadBalancer",
    "rule": "rule",
    "service": "service",
    "middlewares": "middlewares",
    "tls": "tls",
    "server": "server",
    "port": "port",
}
_LIST_KEYS = {"entryPoints", "middlewares"}


def labels_to_dynamic(
    labels: Mapping[str, str], backend_urls: Mapping[str, str], tcp_backends: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """Translate the Traefik docker labels of routed services into the equivalent file-provider dynamic
    configuration: routers exactly as labelled; each service's `loadbalancer.server.port` (the port in
    the container) becomes a local stand-in: `servers[0].url` = backend_urls[service] for HTTP,
    `servers[0].address` = tcp_backends[service] for TCP.
    Labels this helper does not understand fail the test instead of being dropped silently."""
    dynamic: dict[str, Any] = {"http": {"routers": {}, "services": {}}}
    for key, value in labels.items():
        if key in ("traefik.enable",) or key.startswith("traefik.docker."):
            continue
        parts = key.split(".")
        if parts[1:2] not in (["http"], ["tcp"]) or len(parts) < 5 or parts[2] not in ("routers", "services"):
            raise AssertionError(f"label {key!r} is not understood by the contract-test converter")
        protocol, kind, name, path = parts[1], parts[2], parts[3], parts[4:]
        section = dynamic.setdefault(protocol, {"routers": {}, "services": {}})
        try:
            spelled = [_LABEL_KEYS[p.lower()] for p in path]
        except KeyError:
            raise AssertionError(f"label {key!r} is not understood by the contract-test converter") from None
        if kind == "services":
            if spelled != ["loadBalancer", "server", "port"]:
                raise AssertionError(f"label {key!r} is not understood by the contract-test converter")
            int(value)  # a port in the container; replaced by the stand-in below
            server = {"url": backend_urls[name]} if protocol == "http" else {"address": (tcp_backends or {})[name]}
            section["services"][name] = {"loadBalancer": {"servers": [server]}}
            continue
        node = section["routers"].setdefault(name, {})
        for part in spelled[:-1]:
            node = node.setdefault(part, {})
        last = spelled[-1]
        node[last] = [v.strip() for v in value.split(",")] if last in _LIST_KEYS else value
    return dynamic


@contextlib.contextmanager
def tcp_echo_servers(names: list[str]) -> Iterator[dict[str, int]]:
    """One loopback TCP server per name that answers each connection with `<name>:` + what it read."""
    import socketserver
    import threading

    servers = {}
    for name in names:

        class Echo(socketserver.BaseRequestHandler):
            prefix = f"{name}:".encode()

            def handle(self) -> None:
                self.request.sendall(self.prefix + self.request.recv(1024))

        server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Echo)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers[name] = server
    try:
        yield {name: server.server_address[1] for name, server in servers.items()}
    finally:
        for server in servers.values():
            server.shutdown()
            server.server_close()


@dataclass
class Edge:
    """A running edge on loopback."""

    http_port: int
    https_port: int
    ca_file: Path
    folder: Path
    process: subprocess.Popen[bytes]
    extra: dict[str, Any] = field(default_factory=dict)

    def https(self, host: str, path: str = "/", **kwargs: Any) -> Response:
        return https(self.https_port, host, path, ca_file=self.ca_file, **kwargs)

    def http(self, host: str, path: str = "/") -> Response:
        return http_plain(self.http_port, host, path)

    def handshake_error(self, sni: str) -> ssl.SSLError | None:
        return tls_handshake_error(self.https_port, sni, self.ca_file)

    def served_certificate(self, host: str) -> x509.Certificate:
        return served_certificate(self.https_port, host)


def served_certificate(port: int, host: str, timeout: float = 10) -> x509.Certificate:
    """The certificate presented on 127.0.0.1:port for SNI `host`, trusted or not."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with (
        socket.create_connection(("127.0.0.1", port), timeout=timeout) as raw,
        context.wrap_socket(raw, server_hostname=host) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)


def first_certificate(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificates(path.read_bytes())[0]


def traefik_static_for_test(static: dict[str, Any], folder: Path) -> tuple[dict[str, Any], dict[str, int]]:
    """The rendered static config with only what a loopback test must change: entry point addresses
    (free 127.0.0.1 ports), ACME storage (tmp) and CA server (a closed local port, so nothing ever
    leaves the machine), and the docker provider replaced by a file provider over `folder/dynamic`."""
    static = yaml.safe_load(yaml.safe_dump(static))  # deep copy
    ports = {name: free_port() for name in static["entryPoints"]}
    for name, entry_point in static["entryPoints"].items():
        entry_point["address"] = f"127.0.0.1:{ports[name]}"
    for resolver in static.get("certificatesResolvers", {}).values():
        resolver["acme"]["storage"] = str(folder / "acme.json")
        resolver["acme"]["caServer"] = f"https://127.0.0.1:{free_port()}/directory"
    assert "docker" in static["providers"], "the rendered config should read routes from Docker labels"
    static["providers"] = {"file": {"directory": str(folder / "dynamic"), "watch": False}}
    return static, ports


def plan_routes_dynamic(plan: Plan, backend_urls: Mapping[str, str], tcp_backends: Mapping[str, str]) -> dict[str, Any]:
    """The routes of the plan's rendered Traefik labels as file-provider configuration (labels_to_dynamic)."""
    from homelab.render.edge_traefik import route_labels, tcp_route_labels

    labels: dict[str, str] = {}
    for route in plan.routes:
        labels.update(route_labels(plan, route))
    for tcp_route in plan.tcp_routes:
        labels.update(tcp_route_labels(tcp_route))
    return labels_to_dynamic(labels, backend_urls, tcp_backends)


@contextlib.contextmanager
def traefik_edge(
    plan: Plan,
    folder: Path,
    pki: LocalCA,
    tweak_dynamic: Callable[[dict[str, Any]], None] | None = None,
    https_port: int | None = None,
    backend_urls: Mapping[str, str] | None = None,
) -> Iterator[Edge]:
    """The real traefik with the rendered static + dynamic config and the routes from the rendered
    labels, each pointing at a local backend (or at `backend_urls[app]`); certificates from `pki` via dynamic
    tls.certificates; the websecure entry point on `https_port` when given."""
    from homelab.render.edge_traefik import dynamic_config, static_config

    traefik = program("traefik")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "dynamic").mkdir()
    static, ports = traefik_static_for_test(static_config(plan), folder)
    if https_port:
        ports["websecure"] = https_port
        static["entryPoints"]["websecure"]["address"] = f"127.0.0.1:{https_port}"
    config_file = folder / "traefik.yml"
    config_file.write_text(yaml.safe_dump(static, sort_keys=False))
    dynamic = dynamic_config(plan)
    if tweak_dynamic:
        tweak_dynamic(dynamic)
    (folder / "dynamic" / "dynamic.yml").write_text(yaml.safe_dump(dynamic, sort_keys=False))
    certificates = []
    for route in plan.routes:
        fullchain, privkey = pki.leaf(route.host)
        certificates.append({"certFile": str(fullchain), "keyFile": str(privkey)})
    (folder / "dynamic" / "certificates.yml").write_text(yaml.safe_dump({"tls": {"certificates": certificates}}))
    with (
        backends([r.app for r in plan.routes]) as backend_ports,
        tcp_echo_servers([r.name for r in plan.tcp_routes]) as tcp_ports,
    ):
        routes = plan_routes_dynamic(
            plan,
            {**{app: f"http://127.0.0.1:{port}" for app, port in backend_ports.items()}, **(backend_urls or {})},
            {name: f"127.0.0.1:{port}" for name, port in tcp_ports.items()},
        )
        (folder / "dynamic" / "routes.yml").write_text(yaml.safe_dump(routes, sort_keys=False))
        log = folder / "traefik.log"
        with running([traefik, f"--configFile={config_file}"], log, folder) as process:
            edge = Edge(
                ports["web"],
                ports["websecure"],
                pki.ca_file,
                folder,
                process,
                {"ports": ports, "config_file": config_file, "backends": backend_ports},
            )
            first = plan.routes[0]
            # ready when the file provider has loaded the routers (all come from one file)
            wait_until(lambda: edge.https(first.host).status != 404, "traefik to route", process, log)
            yield edge


# --- NGINX ---------------------------------------------------------------------------------------


def nginx_worker_user() -> str:
    """An unprivileged user this machine has for the worker processes: the official image's `nginx`,
    else Debian's `www-data`, else `nobody`."""
    import pwd

    for name in ("nginx", "www-data", "nobody"):
        with contextlib.suppress(KeyError):
            pwd.getpwnam(name)
            return name
    raise AssertionError("no unprivileged user (nginx, www-data, nobody) on this machine")


def nginx_config_for_test(text: str, folder: Path, scratch: Path) -> str:
    """Point the compiled-in writable paths into the test: temp folders into `scratch` (which the
    unprivileged workers must reach, so not under pytest's root-only folder), access log and pid file
    into `folder`. The only change a non-container run needs besides the parameters nginx_conf() takes."""
    paths = "".join(
        f"    {sub}_temp_path {scratch / sub};\n" for sub in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    assert text.count("\nhttp {\n") == 1
    text = text.replace("\nhttp {\n", f"\nhttp {{\n{paths}    access_log {folder / 'access.log'};\n", 1)
    assert text.count("\nworker_processes auto;\n") == 1
    return text.replace("\nworker_processes auto;\n", f"\nworker_processes 2;\npid {folder / 'nginx.pid'};\n", 1)


@contextlib.contextmanager
def scratch_folder() -> Iterator[Path]:
    """A folder the worker user can reach (0711 under /tmp), removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="homelab-nginx-"))
    try:
        path.chmod(0o711)
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def certbot_layout(plan: Plan, cert_dir: Path, pki: LocalCA) -> None:
    """A test-CA pair per name in `cert_dir/<name>/`, with certbot's root-only modes (0700, keys 0600)."""
    cert_dir.mkdir(mode=0o700, parents=True)
    for route in plan.routes:
        pki.leaf(route.host)
        shutil.copytree(pki.folder / route.host, cert_dir / route.host)
        (cert_dir / route.host).chmod(0o700)


def worker_users(master_pid: int) -> list[str]:
    """The user of each `nginx: worker process` whose parent is `master_pid`, as `ps` reports it."""
    listing = subprocess.run(
        ["ps", "-o", "user=,args=", "--ppid", str(master_pid)], capture_output=True, text=True, check=False
    ).stdout
    return [line.split()[0] for line in listing.splitlines() if "nginx: worker process" in line]


@contextlib.contextmanager
def nginx_edge(
    plan: Plan,
    folder: Path,
    pki: LocalCA,
    run_sh: Mapping[str, Any] | None = None,
    cert_dir: Path | None = None,
    upstreams: Mapping[str, str] | None = None,
    path: Path | None = None,
    https_port: int | None = None,
    sso_auth: str | None = None,
) -> Iterator[Edge]:
    """The real nginx with the rendered config on loopback, master as root (when the tests are), workers
    as nginx_worker_user(). Certificates: by default a test-CA pair per name in certbot's modes under
    `folder/edge`; or, with `cert_dir`, whatever is (or will be) there. Upstreams: a local backend per
    app, unless `upstreams` names another address for it (`{port}` in it: that app's backend port).
    With `run_sh` (keyword arguments for nginx_run_sh()), the rendered run.sh starts nginx, through a
    `nginx` on PATH that adds the test's -p/-e, with `path` (a folder of stand-in programs) first on
    its PATH, and the edge is not waited for (the script waits for certificates first)."""
    from homelab.render.edge_nginx import nginx_conf, nginx_run_sh

    nginx = program("nginx")
    folder.mkdir(parents=True, exist_ok=True)
    if cert_dir is None:
        cert_dir = folder / "edge"
        certbot_layout(plan, cert_dir, pki)
    http_port, health_port = free_port(), free_port()
    https_port = https_port or free_port()
    with backends([r.app for r in plan.routes]) as backend_ports, scratch_folder() as scratch:
        addresses = {app: f"127.0.0.1:{port}" for app, port in backend_ports.items()}
        addresses.update({app: text.format(port=backend_ports[app]) for app, text in (upstreams or {}).items()})
        text = nginx_conf(
            plan,
            http_listen=f"127.0.0.1:{http_port}",
            https_listen=f"127.0.0.1:{https_port}",
            cert_dir=str(cert_dir),
            health_listen=f"127.0.0.1:{health_port}",
            upstreams=addresses,
            worker_user=nginx_worker_user(),
            **({"sso_auth": sso_auth} if sso_auth else {}),
        )
        config_file = folder / "nginx.conf"
        config_file.write_text(nginx_config_for_test(text, folder, scratch))
        error_log = folder / "error.log"
        base = [nginx, "-e", str(error_log), "-p", str(folder)]
        extra: dict[str, Any] = {
            "health_port": health_port,
            "config_file": config_file,
            "backends": backend_ports,
            "error_log": error_log,
            "nginx": [*base, "-c", str(config_file)],
        }
        log = folder / "nginx.out"
        if run_sh is None:
            test = subprocess.run([*base, "-c", str(config_file), "-t"], capture_output=True, text=True, timeout=30)
            assert test.returncode == 0, f"nginx -t rejected the rendered config:\n{test.stderr}"
            argv = [*base, "-c", str(config_file), "-g", "daemon off;"]
        else:
            bin_dir = folder / "bin"
            bin_dir.mkdir()
            wrapper = bin_dir / "nginx"
            wrapper.write_text("#!/bin/sh\nexec " + " ".join(base) + ' "$@"\n')
            wrapper.chmod(0o755)
            script = folder / "run.sh"
            script.write_text(
                nginx_run_sh(
                    plan,
                    **{"edge_dir": str(cert_dir), **run_sh},
                    conf=str(config_file),
                    live_conf=str(folder / "live.conf"),
                    upstreams=addresses,
                )
            )
            search = f"{path}:{bin_dir}" if path else str(bin_dir)
            argv = ["/usr/bin/env", f"PATH={search}:{os.environ['PATH']}", "/bin/sh", str(script)]
        with running(argv, log, folder) as process:
            edge = Edge(http_port, https_port, pki.ca_file, folder, process, extra)
            if run_sh is None:
                first = plan.routes[0]
                wait_until(lambda: edge.https(first.host).status > 0, "nginx to serve TLS", process, error_log)
            yield edge
