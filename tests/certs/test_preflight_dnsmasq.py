"""`homelab certs check` against a real DNS server from Debian (dnsmasq): a wrong A record and a CAA
record that allows another CA, each with what to change."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator

import dns.exception
import dns.resolver
import pytest

from homelab.certs import preflight
from tests.certs.conftest import run_check

pytestmark = pytest.mark.real
PUBLIC = "203.0.113.7"


def _caa_hex(tag: str, value: str) -> str:
    """RFC 8659 wire format for dnsmasq's --dns-rr: flags, tag length, tag, value."""
    return (bytes([0, len(tag)]) + tag.encode() + value.encode()).hex()


def _free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def dnsmasq(require_program, tmp_path) -> Iterator[int]:
    binary = require_program("dnsmasq")
    port = _free_udp_port()
    hosts = {"plex": PUBLIC, "cloud": "198.51.100.9", "git": PUBLIC, "ci": PUBLIC, "rstudio": PUBLIC}
    argv = [
        binary,
        "--keep-in-foreground",
        "--no-resolv",
        "--no-hosts",
        "--conf-file=/dev/null",
        "--pid-file=",
        "--listen-address=127.0.0.1",
        "--bind-interfaces",
        f"--port={port}",
        "--local=/example.com/",  # answer NXDOMAIN for names it has nothing for, never forward
        "--local=/com/",
        *[f"--host-record={h}.example.com,{a}" for h, a in hosts.items()],
        f"--dns-rr=example.com,257,{_caa_hex('issue', 'sectigo.com')}",
        f"--dns-rr=git.example.com,257,{_caa_hex('issue', 'letsencrypt.org')}",
    ]
    log = (tmp_path / "dnsmasq.log").open("w")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    try:
        resolver = preflight.Probe(nameserver="127.0.0.1", dns_port=port, timeout=2).resolver()
        deadline = time.monotonic() + 60
        while True:
            try:
                resolver.resolve("plex.example.com", "A")
                break
            except dns.exception.DNSException:
                assert proc.poll() is None, (tmp_path / "dnsmasq.log").read_text()
                assert time.monotonic() < deadline, "dnsmasq did not answer within 60 s"
                time.sleep(0.05)  # poll interval while dnsmasq starts
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def test_wrong_a_record_missing_name_and_caa_refusal(dnsmasq: int, example_config, monkeypatch) -> None:
    monkeypatch.setattr(preflight, "reachable", lambda *args: True)  # tests listen on loopback only
    result = run_check(example_config, dnsmasq, PUBLIC)
    assert result.exit_code == 1, result.output
    out = result.stdout
    assert "ok    plex.example.com address: resolves to 203.0.113.7" in out
    assert (
        "fail  cloud.example.com address: resolves to 198.51.100.9, not this box's public address 203.0.113.7: "
        "point the A record at 203.0.113.7 (check ddclient)"
    ) in out
    assert "fail  grafana.example.com address: no A/AAAA record: add `grafana.example.com. A 203.0.113.7`" in out
    assert (
        "fail  plex.example.com CAA: CAA at example.com allows only sectigo.com (issue): "
        'add `example.com. CAA 0 issue "letsencrypt.org"`'
    ) in out
    assert "ok    git.example.com CAA: CAA at git.example.com allows letsencrypt.org" in out
