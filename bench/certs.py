"""Benchmark DNS-01 issuance through an RFC 2136 server (printed, never asserted; the tests assert loosely).

On loopback: BIND's named authoritative for example.com, its TSIG key allowed only `_acme-challenge` TXT
records, and Pebble validating DNS-01 by asking that named. Per round, a wildcard certificate
(example.com + *.example.com), each path from nothing (a new ACME account, an empty store):
  bare-certbot   certbot certonly --dns-rfc2136 straight at the server, no propagation wait: the bare
                 client (lego, Traefik's client, is not packaged here; certbot is the bare ACME client)
  traefik-edge   Traefik with homelab's rendered static config and compose environment
                 (tests/certs/edges_native.py), from its start to the certificate in acme.json
  certbot-edge   homelab's rendered certbot.sh with the real certbot, from its start to the lineage
Rounds are interleaved; the ratio is the median of per-round ratios to bare-certbot (goal: <= 2).

Usage: .venv/bin/python bench/certs.py [--rounds 3]. Needs named, pebble, certbot (scripts/apt/certs.txt)
and traefik (the test extra).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.certs.conftest import dns01_config
from tests.certs.edges_native import certbot_issues, traefik_issues
from tests.certs.named import ALGORITHM, Named, named
from tests.certs.pebbles import Ca, one
from tests.conftest import find_program

TIMEOUT = 180.0


def program(name: str) -> str:
    path = find_program(name)
    if path is None:
        sys.exit(f"bench/certs.py needs {name}")
    return path


def bare_certbot(server: Named, ca: Ca, work: Path) -> float:
    work.mkdir(parents=True)
    ini = work / "rfc2136.ini"
    ini.write_text(
        f"dns_rfc2136_server = 127.0.0.1\ndns_rfc2136_port = {server.port}\ndns_rfc2136_name = {server.key_name}\n"
        f"dns_rfc2136_algorithm = {ALGORITHM.upper()}\ndns_rfc2136_secret = {server.secret}\n"
    )
    ini.chmod(0o600)
    argv = [
        program("certbot"), "certonly", "--non-interactive", "--agree-tos", "--email", "a@example.com",
        "--config-dir", str(work / "le"), "--work-dir", str(work / "w"), "--logs-dir", str(work / "l"),
        "--server", ca.directory, "--dns-rfc2136", "--dns-rfc2136-credentials", str(ini),
        "--dns-rfc2136-propagation-seconds", "0", "--key-type", "ecdsa", "-d", "example.com", "-d", "*.example.com",
    ]  # fmt: skip
    started = time.monotonic()
    done = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env={"REQUESTS_CA_BUNDLE": str(ca.api_cert), "PATH": "/usr/bin:/bin"},
    )
    took = time.monotonic() - started
    if done.returncode != 0:
        sys.exit(f"bare certbot failed:\n{done.stdout}\n{done.stderr}")
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-certs-") as tmp:
        work = Path(tmp)
        programs = {name: program(name) for name in ("openssl", "pebble", "pebble-challtestsrv")}
        with named(program("named"), work / "named") as server, one(programs, work / "pebble", server.address) as ca:
            traefik, certbot = program("traefik"), program("certbot")
            paths: dict[str, Callable[[Path], float]] = {
                "bare-certbot": lambda w: bare_certbot(server, ca, w),
                "traefik-edge": lambda w: (
                    traefik_issues(_config(w, server, ca, "traefik"), traefik, w, TIMEOUT).seconds
                ),
                "certbot-edge": lambda w: certbot_issues(_config(w, server, ca, "nginx"), certbot, w, TIMEOUT).seconds,
            }
            times: dict[str, list[float]] = {name: [] for name in paths}
            for round_ in range(args.rounds):
                order = list(paths)[round_ % len(paths) :] + list(paths)[: round_ % len(paths)]
                for name in order:
                    times[name].append(paths[name](work / f"{name}-{round_}"))
    print(f"wildcard + apex through RFC 2136 (BIND) and Pebble, {args.rounds} rounds, seconds")
    print(f"{'path':14} {'median':>7} {'min':>6} {'max':>6}  ratio to bare-certbot (median of per-round)")
    for name, values in times.items():
        ratio = statistics.median(v / b for v, b in zip(values, times["bare-certbot"], strict=True))
        print(f"{name:14} {statistics.median(values):7.2f} {min(values):6.2f} {max(values):6.2f}  {ratio:.2f}x")


def _config(work: Path, server: Named, ca: Ca, edge: str) -> Path:
    """The example on DNS-01 through `server`, Pebble as its CA, in a folder beside the edge's `work`."""
    work = work.parent / f"{work.name}-config"
    return dns01_config(work, server.port, server.secret, edge=edge, ca_server=ca.directory, ca_bundle=ca.api_cert)


if __name__ == "__main__":
    main()
