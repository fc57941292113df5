"""Benchmark DNS-01 issuance through an RFC 2136 server (printed, never asserted; the tests assert loosely).

On loopback: BIND's named authoritative for example.com, its TSIG key allowed only `_acme-challenge` TXT
records, and Pebble validating DNS-01 by asking that named. Per round, a wildcard certificate
(example.com + *.example.com), each path from nothing (a new ACME account, an empty store):
  bare-lego      lego run --dns rfc2136 straight at the server (Debian's lego 4.9, the client Traefik has
                 built in): polling that server each second, no authoritative-nameserver check
  bare-certbot   certbot certonly --dns-rfc2136 straight at the server, no propagation wait
  traefik-edge   Traefik with homelab's rendered static config and compose environment
                 (tests/certs/edges_native.py), from its start to the certificate in acme.json
  certbot-edge   homelab's rendered certbot.sh with the real certbot, from its start to the lineage
Rounds are interleaved; each edge's ratio is the median of per-round ratios to the bare client it runs
(traefik-edge to bare-lego, certbot-edge to bare-certbot; goal: <= 2).

Usage: .venv/bin/python bench/certs.py [--rounds 3]. Needs named, pebble, certbot, lego (scripts/apt/certs.txt)
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
DOMAINS = ("example.com", "*.example.com")
# each edge against the bare ACME client inside it
BARE = {"traefik-edge": "bare-lego", "certbot-edge": "bare-certbot"}


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
        "--dns-rfc2136-propagation-seconds", "0", "--key-type", "ecdsa",
        *(arg for domain in DOMAINS for arg in ("-d", domain)),
    ]  # fmt: skip
    return _timed("bare certbot", argv, {"REQUESTS_CA_BUNDLE": str(ca.api_cert)})


def bare_lego(server: Named, ca: Ca, work: Path) -> float:
    argv = [
        program("lego"), "--server", ca.directory, "--email", "a@example.com", "--accept-tos", "--path", str(work),
        "--dns", "rfc2136", "--dns.resolvers", server.address, "--dns.disable-cp", "--key-type", "ec256",
        *(arg for domain in DOMAINS for arg in ("--domains", domain)), "run",
    ]  # fmt: skip
    env = {
        "LEGO_CA_CERTIFICATES": str(ca.api_cert),
        "RFC2136_NAMESERVER": server.address,
        "RFC2136_TSIG_KEY": server.key_name,
        "RFC2136_TSIG_ALGORITHM": f"{ALGORITHM}.",  # lego wants the name as a DNS name
        "RFC2136_TSIG_SECRET": server.secret,
        # lego's defaults (60 s between the wildcard's and the apex's challenge, a poll every 2 s) are fixed
        # waits, not the client: the shortest it takes (whole seconds)
        "RFC2136_SEQUENCE_INTERVAL": "1",
        "RFC2136_POLLING_INTERVAL": "1",
        "RFC2136_PROPAGATION_TIMEOUT": str(int(TIMEOUT)),
    }
    return _timed("bare lego", argv, env)


def _timed(name: str, argv: list[str], env: dict[str, str]) -> float:
    """Seconds `argv` took to succeed with only `env` (and PATH); exits with its output if it failed."""
    started = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT, env=env | {"PATH": "/usr/bin:/bin"})
    took = time.monotonic() - started
    if done.returncode != 0:
        sys.exit(f"{name} failed:\n{done.stdout}\n{done.stderr}")
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
                "bare-lego": lambda w: bare_lego(server, ca, w),
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
    print(f"{'path':14} {'median':>7} {'min':>6} {'max':>6}  ratio to the bare client (median of per-round)")
    for name, values in times.items():
        bare = BARE.get(name)
        ratio = "" if bare is None else f"{_median_ratio(values, times[bare]):.2f}x to {bare}"
        print(f"{name:14} {statistics.median(values):7.2f} {min(values):6.2f} {max(values):6.2f}  {ratio}")


def _median_ratio(values: list[float], bare: list[float]) -> float:
    return statistics.median(v / b for v, b in zip(values, bare, strict=True))


def _config(work: Path, server: Named, ca: Ca, edge: str) -> Path:
    """The example on DNS-01 through `server`, Pebble as its CA, in a folder beside the edge's `work`."""
    work = work.parent / f"{work.name}-config"
    return dns01_config(work, server.port, server.secret, edge=edge, ca_server=ca.directory, ca_bundle=ca.api_cert)


if __name__ == "__main__":
    main()
