"""Benchmark the TLS edge the way the seed studies measure a TLS reverse proxy (printed, never asserted).

On loopback, against one backend NGINX serving a 1 KiB and a 100 MB file over plain HTTP:
  direct    NGINX serving the files itself over TLS (the path without a proxy)
  tuned     a hand-tuned NGINX TLS proxy: `upstream` with `keepalive 64`, HTTP/1.1, `Connection ""`
  traefik   stock Traefik, file provider, one router, no middlewares, default TLS options
  nginx-edge / traefik-edge   OUR edges, rendered by homelab's own render functions for the bundled
            example, changed only as the contract tests change them (ports, certificate paths, upstream
            addresses, NGINX's writable paths, Traefik's labels -> file provider). On a plain route
            (git.example.com) and, as `…-ws`, on a websocket-enabled one (rstudio.example.com).
Every TLS endpoint uses an EC P-256 certificate from the same throwaway CA.

Per path and round, with wrk (Debian `wrk`, one thread like the issue's measurement):
  1 KiB keepalive req/s and p99 latency (-c32), 100 MB download MB/s (-c1), and new-connection rate
  (`Connection: close`: wrk never resumes sessions, so each request is a full handshake, -c16).
Rounds are interleaved (every path once per metric per round, the order rotated each round); ratios
are medians of per-round ratios, so a load change on this shared box between rounds cancels out.
Each measurement also records the CPU time of the path's processes (a proxy's backend included) and
of wrk, per unit of work; direct TLS's total over a path's is the path's CPU ceiling against direct
(bench/edge_report.py, docs/edge-performance.md).

Usage: .venv/bin/python bench/edge.py [--rounds 3] [--seconds 5] [--json out.json] [--chart out.png]
or --from-json out.json [--chart out.png] (table/chart only). Needs nginx and wrk (scripts/apt/edge.txt),
traefik (the test extra), matplotlib for --chart (the bench extra).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import resource
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import yaml  # noqa: E402

from bench.edge_report import BASELINE, COSTS, DIRECT, METRICS, STOCK, chart, costs, table  # noqa: E402
from homelab.render import tls_policy  # noqa: E402
from homelab.render.edge_nginx import nginx_conf  # noqa: E402
from homelab.render.edge_traefik import dynamic_config, static_config  # noqa: E402
from tests.contract.edge_support import (  # noqa: E402
    LocalCA,
    certbot_layout,
    example_plan,
    free_port,
    nginx_config_for_test,
    nginx_worker_user,
    plan_routes_dynamic,
    program,
    running,
    traefik_static_for_test,
    wait_until,
)

HOST, WS_HOST = "git.example.com", "rstudio.example.com"  # a plain route and a websocket-enabled one
BULK_BYTES = 100 * 1000 * 1000
TICKS = os.sysconf("SC_CLK_TCK")

TEMPS = ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
TEMP_PATHS = "".join(f"    {t}_temp_path @SCRATCH@/{t};\n" for t in TEMPS)
TLS = (
    "    ssl_protocols TLSv1.2 TLSv1.3;\n"
    f"    ssl_ciphers {tls_policy.openssl_ciphers()};\n"
    f"    ssl_ecdh_curve {tls_policy.openssl_curves()};\n"
)
NGINX_HEAD = (
    "worker_processes {workers};\npid {folder}/nginx.pid;\nevents {{ worker_connections 4096; }}\n"
    "http {{\n" + TEMP_PATHS + "    access_log {folder}/access.log;\n    sendfile on;\n"
)
BACKEND = NGINX_HEAD + (
    "    keepalive_requests 1000000;\n"
    "    server {{\n        listen 127.0.0.1:{port};\n        root {files};\n    }}\n}}\n"
)
DIRECT_SERVER = (
    "    server {{\n        listen 127.0.0.1:{port} ssl http2;\n        server_name " + HOST + ";\n"
    "        ssl_certificate {cert};\n        ssl_certificate_key {key};\n        root {files};\n    }}\n}}\n"
)
TUNED_SERVER = (
    "    upstream backend {{\n        server 127.0.0.1:{backend};\n        keepalive 64;\n    }}\n"
    "    server {{\n        listen 127.0.0.1:{port} ssl http2;\n        server_name " + HOST + ";\n"
    "        ssl_certificate {cert};\n        ssl_certificate_key {key};\n"
    "        location / {{\n            proxy_pass http://backend;\n            proxy_http_version 1.1;\n"
    '            proxy_set_header Connection "";\n            proxy_set_header Host $host;\n        }}\n'
    "    }}\n}}\n"
)
DIRECT_TLS, TUNED_PROXY = NGINX_HEAD + TLS + DIRECT_SERVER, NGINX_HEAD + TLS + TUNED_SERVER


class Bench:
    """Starts every path under one folder; `endpoints` maps a path name to (port, host)."""

    def __init__(self, folder: Path, stack: contextlib.ExitStack) -> None:
        self.folder, self.stack = folder, stack
        self.nginx, self.traefik = program("nginx"), program("traefik")
        self.pki = LocalCA(folder / "pki")
        self.cert, self.key = self.pki.leaf(HOST)
        self.files = folder / "files"
        self.files.mkdir(mode=0o755)
        (self.files / "1k").write_bytes(b"x" * 1024)
        with (self.files / "100m").open("wb") as out:
            out.truncate(BULK_BYTES)
        for path in self.files.iterdir():
            path.chmod(0o644)
        self.endpoints: dict[str, tuple[int, str]] = {}
        # each path's process groups (`running` starts every program as a group leader): its own and,
        # for a proxy, the backend's, so a proxy is charged for the work it makes the backend do
        self.groups: dict[str, list[int]] = {}
        self.backend_group = 0

    def start_nginx(self, name: str, text: str, port: int, host: str) -> None:
        folder = self.folder / name
        (folder / "scratch").mkdir(parents=True)
        folder.chmod(0o711)
        (folder / "scratch").chmod(0o711)
        config = folder / "nginx.conf"
        config.write_text(text.replace("@SCRATCH@", str(folder / "scratch")))
        argv = [self.nginx, "-e", str(folder / "error.log"), "-p", str(folder), "-c", str(config)]
        check = subprocess.run([*argv, "-t"], capture_output=True, text=True, timeout=30)
        if check.returncode != 0:
            raise SystemExit(f"{name}: nginx -t failed:\n{check.stderr}")
        process = self.stack.enter_context(running([*argv, "-g", "daemon off;"], folder / "nginx.out", folder))
        self.wait(name, port, process, folder / "error.log")
        if name == "backend":  # plain HTTP, the others' upstream
            self.backend_group = process.pid
        else:
            self.add_endpoint(name, port, host, process.pid)

    def add_endpoint(self, name: str, port: int, host: str, group: int) -> None:
        self.endpoints[name] = (port, host)
        self.groups[name] = [group] if name == DIRECT else [group, self.backend_group]

    def wait(self, name: str, port: int, process: subprocess.Popen[bytes], log: Path) -> None:
        def listening() -> bool:
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
            return True

        wait_until(listening, f"{name} to listen", process, log, timeout=30)

    def start_all(self) -> None:
        backend = free_port()
        common = {"workers": 2, "files": self.files, "cert": self.cert, "key": self.key}
        text = BACKEND.format(**{**common, "workers": 1}, folder=self.folder / "backend", port=backend)
        self.start_nginx("backend", text, backend, HOST)
        for name, template in ((DIRECT, DIRECT_TLS), (BASELINE, TUNED_PROXY)):
            port = free_port()
            text = template.format(**common, folder=self.folder / name, port=port, backend=backend)
            self.start_nginx(name, text, port, HOST)
        self.start_stock_traefik(backend)
        self.start_our_nginx(backend)
        self.start_our_traefik(backend)

    def start_stock_traefik(self, backend: int) -> None:
        folder, port = self.folder / STOCK, free_port()
        folder.mkdir()
        dynamic = {
            "http": {
                "routers": {"r": {"rule": f"Host(`{HOST}`)", "entryPoints": ["websecure"], "service": "s", "tls": {}}},
                "services": {"s": {"loadBalancer": {"servers": [{"url": f"http://127.0.0.1:{backend}"}]}}},
            },
            "tls": {"certificates": [{"certFile": str(self.cert), "keyFile": str(self.key)}]},
        }
        static = {
            "entryPoints": {"websecure": {"address": f"127.0.0.1:{port}"}},
            "providers": {"file": {"filename": str(folder / "dynamic.yml")}},
        }
        self.run_traefik(STOCK, folder, static, dynamic, port, [HOST])

    def run_traefik(
        self,
        name: str,
        folder: Path,
        static: dict[str, Any],
        dynamic: dict[str, Any],
        port: int,
        hosts: list[str],
        environment: dict[str, str] | None = None,
    ) -> None:
        (folder / "dynamic.yml").write_text(yaml.safe_dump(dynamic, sort_keys=False))
        config = folder / "traefik.yml"
        config.write_text(yaml.safe_dump(static, sort_keys=False))
        log = folder / "traefik.log"
        settings = [f"{key}={value}" for key, value in (environment or {}).items()]
        argv = ["/usr/bin/env", *settings, self.traefik, f"--configFile={config}"]
        process = self.stack.enter_context(running(argv, log, folder))
        for host in hosts:
            wait_until(lambda host=host: wrk_status(port, host) == 200, f"{name} to route {host}", process, log, 30)
            self.add_endpoint(name if host == HOST else f"{name}-ws", port, host, process.pid)

    def start_our_nginx(self, backend: int) -> None:
        folder, port = self.folder / "nginx-edge", free_port()
        plan = example_plan(folder / "example", kind="nginx")
        certbot_layout(plan, folder / "edge", self.pki)
        text = nginx_conf(
            plan,
            http_listen=f"127.0.0.1:{free_port()}",
            https_listen=f"127.0.0.1:{port}",
            cert_dir=str(folder / "edge"),
            health_listen=f"127.0.0.1:{free_port()}",
            upstreams={r.app: f"127.0.0.1:{backend}" for r in plan.routes},
            worker_user=nginx_worker_user(),
        )
        text = nginx_config_for_test(text, folder, Path("@SCRATCH@"))
        self.start_nginx("nginx-edge", text, port, HOST)
        self.add_endpoint("nginx-edge-ws", port, WS_HOST, self.groups["nginx-edge"][0])

    def start_our_traefik(self, backend: int) -> None:
        folder = self.folder / "traefik-edge"
        plan = example_plan(folder / "example", kind="traefik")
        (folder / "dynamic").mkdir()
        static, ports = traefik_static_for_test(static_config(plan), folder)
        static["providers"] = {"file": {"filename": str(folder / "dynamic.yml")}}
        routes = plan_routes_dynamic(
            plan,
            {r.app: f"http://127.0.0.1:{backend}" for r in plan.routes},
            {r.name: "127.0.0.1:9" for r in plan.tcp_routes},
        )
        dynamic = dynamic_config(plan)
        for section in ("http", "tcp"):
            dynamic.setdefault(section, {}).update(routes.get(section, {}))
        certificates = []
        for route in plan.routes:
            chain = self.pki.folder / route.host
            certificates.append({"certFile": str(chain / "fullchain.pem"), "keyFile": str(chain / "privkey.pem")})
        dynamic["tls"]["certificates"] = certificates
        # the environment the catalog gives the container (Go runtime settings)
        catalog = yaml.safe_load((REPO / "compose" / "edge-traefik.yaml").read_text())
        environment = catalog["services"]["traefik"].get("environment", {})
        self.run_traefik("traefik-edge", folder, static, dynamic, ports["websecure"], [HOST, WS_HOST], environment)


# --- wrk -------------------------------------------------------------------------------------------

# wrk connects where the URL's host resolves; the example's names do not, so connect to loopback while
# the URL still gives SNI and Host.
LOOPBACK_LUA = 'wrk.resolve = function(host, service) wrk.addrs = wrk.lookup("127.0.0.1", service) end\n'
UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 6e4}  # latency -> ms
UNITS |= {"B": 1e-6, "KB": 1024 / 1e6, "MB": 1024**2 / 1e6, "GB": 1024**3 / 1e6}  # transfer -> MB (10^6)


def wrk(port: int, host: str, path: str, connections: int, seconds: int, *extra: str) -> dict[str, float]:
    script = Path(tempfile.gettempdir()) / "homelab-bench-edge.lua"
    script.write_text(LOOPBACK_LUA)
    argv = ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--timeout", "30s", "--latency", "-s", str(script)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(
        [*argv, *extra, f"https://{host}:{port}{path}"], capture_output=True, text=True, timeout=seconds + 60
    ).stdout
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if bad or "requests in" not in out or re.search(r"\s0 requests in", out):
        raise SystemExit(f"wrk against {host}:{port}{path} got errors:\n{out}")
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    p99 = re.search(r"\s99%\s+([\d.]+)(\w+)", out)
    transfer = re.search(r"Transfer/sec:\s+([\d.]+)(\w+)", out)
    assert p99 and transfer, out
    return {
        "rps": rps,
        "p99_ms": float(p99.group(1)) * UNITS[p99.group(2)],
        "mbs": float(transfer.group(1)) * UNITS[transfer.group(2)],
        "cpu_s": after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime,
    }


def group_cpu(groups: list[int]) -> float:
    """CPU seconds (user + system) used so far by the processes of these process groups."""
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):  # a process that just exited
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) in groups:  # the fields after the name: state ppid pgrp ...
                total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / TICKS


def wrk_status(port: int, host: str) -> int:
    """200 once one request for the small file succeeds (used as the readiness check)."""
    with contextlib.suppress(SystemExit, subprocess.TimeoutExpired):
        return 200 if wrk(port, host, "/1k", 1, 1) else 0
    return 0


def run_rounds(paths: Bench, rounds: int, seconds: int, loads: list[str]) -> dict[str, dict[str, list[float]]]:
    """Every path once per metric per round; appends the load average after each round to `loads`.
    Besides the metrics, `server_<metric>` and `client_<metric>` hold the CPU per unit (COSTS)."""
    endpoints = paths.endpoints
    keys = [*METRICS, *(f"{side}_{m}" for m in COSTS for side in ("server", "client"))]
    results: dict[str, dict[str, list[float]]] = {name: {key: [] for key in keys} for name in endpoints}
    names = list(endpoints)
    for name in names:  # warm-up: caches, keepalive pools, Traefik's lazy setup
        with contextlib.suppress(SystemExit):  # on a loaded box 1 s may end before a handshake does
            wrk(*endpoints[name], "/1k", 32, 1)
    for number in range(rounds):
        for metric, path, connections, extra in (
            ("rps", "/1k", 32, ()),
            ("bulk_mbs", "/100m", 1, ()),
            ("new_cps", "/1k", 16, ("-H", "Connection: close")),
        ):
            for name in names[number % len(names) :] + names[: number % len(names)]:
                server = group_cpu(paths.groups[name])
                out = wrk(*endpoints[name], path, connections, seconds, *extra)
                server = group_cpu(paths.groups[name]) - server
                by = results[name]
                by[metric].append(out["mbs"] if metric == "bulk_mbs" else out["rps"])
                if metric == "rps":
                    by["p99_ms"].append(out["p99_ms"])
                units = by[metric][-1] * seconds / COSTS[metric][0]
                by[f"server_{metric}"].append(server / units)
                by[f"client_{metric}"].append(out["cpu_s"] / units)
        loads.append(load())
        print(f"round {number + 1}/{rounds} done, load {loads[-1]}", file=sys.stderr)
    return results


# --- report ----------------------------------------------------------------------------------------


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def versions() -> dict[str, str]:
    nginx = subprocess.run([program("nginx"), "-v"], capture_output=True, text=True).stderr.strip()
    traefik = subprocess.run([program("traefik"), "version"], capture_output=True, text=True).stdout.split()
    return {"nginx": nginx.split("/")[-1], "traefik": traefik[1] if len(traefik) > 1 else "?"}


def bench(rounds: int, seconds: int) -> dict[str, Any]:
    program("wrk")
    with contextlib.ExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="homelab-bench-edge-")))
        folder.chmod(0o711)
        paths = Bench(folder, stack)
        paths.start_all()
        before = load()
        started = time.time()
        loads: list[str] = []
        results = run_rounds(paths, rounds, seconds, loads)
    meta = {
        "rounds": rounds,
        "seconds": seconds,
        "load": f"{before} -> {load()}",
        "round_loads": loads,
        "wall_s": round(time.time() - started),
    }
    return {"meta": {**meta, **versions(), "cpus": os.cpu_count()}, "results": results}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--json", type=Path, help="write the raw results here")
    parser.add_argument("--from-json", type=Path, help="print (and chart) saved results instead of measuring")
    parser.add_argument("--chart", type=Path, help="write a PNG chart of the ratios here (needs matplotlib)")
    args = parser.parse_args()
    data = json.loads(args.from_json.read_text()) if args.from_json else bench(args.rounds, args.seconds)
    if args.json:
        args.json.write_text(json.dumps(data, indent=1) + "\n")
    print(f"load average (1, 5, 15 min): {data['meta']['load']}; {json.dumps(data['meta'])}")
    print(table(data))
    print()
    print(costs(data))
    if args.chart:
        chart(data, args.chart)


if __name__ == "__main__":
    main()
