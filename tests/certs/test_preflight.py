"""`homelab certs check` against a local DNS server, local ports and a local clock reference."""

from __future__ import annotations

import email.utils
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from typer.testing import CliRunner

from homelab.certs import preflight
from homelab.certs.preflight import Probe
from homelab.cli import app
from tests.certs import dnsserver
from tests.certs.conftest import run_check

HOSTS = ["plex", "cloud", "git", "ci", "rstudio", "grafana"]
PUBLIC = "203.0.113.7"


def _a_records(address: str = PUBLIC) -> dict[tuple[str, str], list[str]]:
    return {(f"{h}.example.com", "A"): [address] for h in HOSTS} | {("example.com", "NS"): ["ns.example.com."]}


def _by_name(checks):
    return {c.name: c for c in checks}


def _dns_checks(plan, records, address=PUBLIC):
    with dnsserver.serve(records) as port:
        resolver = Probe(nameserver="127.0.0.1", dns_port=port, timeout=10).resolver()
        out = []
        for route in plan.routes:
            out += preflight._address(route.host, address, resolver)
            out += preflight._caa(route.host, plan, resolver)
        return _by_name(out)


def test_names_must_point_at_this_box(make_plan) -> None:
    records = _a_records() | {("cloud.example.com", "A"): ["198.51.100.9"]}
    del records[("git.example.com", "A")]
    checks = _dns_checks(make_plan(), records)
    assert checks["plex.example.com address"].level == "ok"
    assert checks["cloud.example.com address"].level == "fail"
    assert checks["cloud.example.com address"].detail == (
        "resolves to 198.51.100.9, not this box's public address 203.0.113.7: "
        "point the A record at 203.0.113.7 (check ddclient)"
    )
    assert checks["git.example.com address"].detail == (
        "no A/AAAA record: add `git.example.com. A 203.0.113.7` at your DNS provider (or ddns)"
    )


def test_caa_of_the_closest_node_decides(make_plan) -> None:
    records = _a_records() | {
        ("example.com", "CAA"): ['0 issue "sectigo.com"', '0 iodef "mailto:sec@example.com"'],
        ("plex.example.com", "CAA"): ['0 issue "letsencrypt.org; validationmethods=tls-alpn-01"'],
    }
    checks = _dns_checks(make_plan(), records)
    assert checks["plex.example.com CAA"].level == "ok"
    assert checks["plex.example.com CAA"].detail == "CAA at plex.example.com allows letsencrypt.org"
    assert checks["cloud.example.com CAA"].level == "fail"
    assert checks["cloud.example.com CAA"].detail == (
        'CAA at example.com allows only sectigo.com (issue): add `example.com. CAA 0 issue "letsencrypt.org"`'
    )


def test_no_caa_or_only_iodef_allows_any_ca(make_plan) -> None:
    checks = _dns_checks(make_plan(), _a_records())
    assert checks["plex.example.com CAA"].detail == "no CAA restriction: any CA may issue"
    checks = _dns_checks(make_plan(), _a_records() | {("example.com", "CAA"): ['0 iodef "mailto:a@example.com"']})
    assert checks["ci.example.com CAA"].level == "ok"


def test_issuewild_governs_wildcards(make_plan) -> None:
    plan = make_plan()
    records = {("example.com", "CAA"): ['0 issue "letsencrypt.org"', '0 issuewild ";"']}
    with dnsserver.serve(records) as port:
        resolver = Probe(nameserver="127.0.0.1", dns_port=port, timeout=10).resolver()
        wild = next(preflight._caa("*.example.com", plan, resolver))
        plain = next(preflight._caa("plex.example.com", plan, resolver))
    assert (wild.level, wild.detail) == (
        "fail",
        'CAA at example.com allows only no CA (issuewild): add `example.com. CAA 0 issuewild "letsencrypt.org"`',
    )
    assert plain.level == "ok"


def test_test_ca_skips_caa(make_plan) -> None:
    checks = _dns_checks(make_plan(ca_server="https://127.0.0.1:14000/dir"), _a_records())
    assert checks["plex.example.com CAA"].detail == "test CA: CAA not checked"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_challenge_port_answers_or_says_what_to_forward(make_plan) -> None:
    plan = make_plan()  # tls challenge: port 443 at the public address
    port = _free_port()
    probe = Probe(address="127.0.0.1", challenge_ports=(("tls", port),), listen_host="127.0.0.1", timeout=10)
    ok = next(preflight._challenge(plan, "127.0.0.1", probe))
    assert (ok.level, ok.detail) == ("ok", f"TLS-ALPN-01: 127.0.0.1:{port} answers")
    # listening elsewhere than where the connection goes: what a closed router port looks like
    blocked = Probe(address="127.0.0.1", challenge_ports=(("tls", port),), listen_host="127.0.0.2", timeout=10)
    fail = next(preflight._challenge(plan, "127.0.0.1", blocked))
    assert fail.level == "fail"
    assert fail.detail.startswith(f"TLS-ALPN-01: 127.0.0.1:{port} does not answer: forward TCP {port} on your router")


@contextmanager
def _date_server(offset: float) -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()

        def date_time_string(self, timestamp=None) -> str:
            return email.utils.formatdate(time.time() + offset, usegmt=True)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/directory"
    finally:
        server.shutdown()
        server.server_close()


def test_clock_skew(make_plan) -> None:
    with _date_server(-600) as url:
        check = next(preflight._clock(url, 10))
    assert check.level == "fail"
    assert check.detail.startswith("6")  # about 600 s
    assert "ahead of" in check.detail and "timedatectl set-ntp true" in check.detail
    with _date_server(0) as url:
        assert next(preflight._clock(url, 10)).level == "ok"


def test_cli_check_exit_1_names_what_to_change(make_plan, example_config, monkeypatch) -> None:
    make_plan()
    # tests listen on loopback only: the port probe is covered above
    monkeypatch.setattr(preflight, "reachable", lambda *args: True)
    records = _a_records() | {("rstudio.example.com", "A"): ["198.51.100.9"]}
    with dnsserver.serve(records) as port:
        result = run_check(example_config, port, PUBLIC)
    assert result.exit_code == 1, result.output
    assert "fail  rstudio.example.com address: resolves to 198.51.100.9" in result.stdout
    assert "ok    plex.example.com address: resolves to 203.0.113.7" in result.stdout


def test_run_takes_the_public_address_from_the_config(example_config, tmp_path) -> None:
    from homelab.config.loader import load
    from homelab.plan import build_plan

    text = example_config.read_text() + "\ncerts:\n  public_address: 127.0.0.1\n"
    example_config.write_text(text)
    plan = build_plan(load(example_config))
    port = _free_port()
    with dnsserver.serve(_a_records("127.0.0.1")) as dns_port, _date_server(0) as url:
        probe = Probe(
            nameserver="127.0.0.1",
            dns_port=dns_port,
            challenge_ports=(("tls", port),),
            listen_host="127.0.0.2",  # not where the probe connects: a closed router port
            clock_url=url,
            timeout=10,
        )
        checks = _by_name(preflight.run(plan, probe))
    assert checks["plex.example.com address"].detail == "resolves to 127.0.0.1"
    assert checks[f"port {port}"].detail.startswith(f"TLS-ALPN-01: 127.0.0.1:{port} does not answer")
    assert checks["clock"].level == "ok"


def test_bad_public_address_is_a_config_error(example_config) -> None:
    example_config.write_text(example_config.read_text() + "\ncerts:\n  public_address: my-router\n")
    result = CliRunner().invoke(app, ["certs", "check", "--config", str(example_config)])
    assert result.exit_code == 2
    assert "certs.public_address" in result.stderr


def test_dns_credentials_a_secret_that_is_no_key_fails_before_asking(tmp_path) -> None:
    from homelab.config.loader import load
    from homelab.plan import build_plan
    from tests.certs.conftest import dns01_config

    config = dns01_config(tmp_path / "config", 9, "not base64 at all!")
    checks = list(preflight._dns_update(build_plan(load(config)), timeout=1))
    assert [(c.level, c.name) for c in checks] == [("fail", "DNS credentials")]
    assert checks[0].detail.endswith("/secrets/tsig: the TSIG secret is not base64 (copy it from the server's key)")
