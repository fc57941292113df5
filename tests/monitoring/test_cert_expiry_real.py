"""Expiry watched, with real programs on loopback (issue 15's proof of the metric and its alert).

    a TLS server on 127.0.0.1 serving, by SNI, a certificate expiring in 5 days and one in 60 days
      -> collectd running the rendered collectd.conf's exec block (homelab/certs/cert-expiry.sh as nobody)
      -> write_graphite -> carbon-cache with the rendered carbon.conf, schemas and aggregation
      -> graphite-web /render -> the rendered alert rules, evaluated as Grafana does (grafana_eval)

The example homelab.yaml with the edge's HTTPS port moved to the test server's port, a short interval and
no backup (its program reads a state directory this test has no use for). collectd loads only the
catalog's exec plugin: the hardware plugins are proven in test_end_to_end.py.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import shutil
import socketserver
import ssl
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from homelab.certs import expiry
from homelab.config.loader import load
from homelab.monitoring.catalog_builder import catalog_for
from homelab.plan import build_plan
from homelab.render import render_all
from homelab.render.collectd import collectd_conf
from tests.conftest import EXAMPLE, EXAMPLE_SECRETS, find_program, missing, write_secret
from tests.monitoring import e2e_support as e2e
from tests.monitoring import grafana_eval

pytestmark = pytest.mark.real

INTERVAL = 5  # seconds between two fetches of every name
SOON, LATER = "cloud.example.com", "git.example.com"  # served with 5-day and 60-day certificates
DAYS = {SOON: 5, LATER: 60}
UNSERVED = "plex.example.com"  # the server refuses its handshake: an unreachable name


def _certificate(name: str, days: int, directory: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / f"{name}.crt", directory / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


class _Handshake(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        self.request.settimeout(10)
        server: _TlsServer = self.server  # type: ignore[assignment]
        with contextlib.suppress(OSError), server.default.wrap_socket(self.request, server_side=True) as tls:
            tls.recv(1)  # until the client (openssl s_client, stdin closed) hangs up


class _TlsServer(socketserver.ThreadingTCPServer):
    """The edge as the program sees it: one certificate per SNI name, a refused handshake otherwise."""

    daemon_threads = True

    def __init__(self, contexts: dict[str, ssl.SSLContext]) -> None:
        super().__init__(("127.0.0.1", 0), _Handshake)
        self.default = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)

        def pick(sock: ssl.SSLObject, name: str | None, _context: ssl.SSLContext) -> int | None:
            if name not in contexts:
                return ssl.ALERT_DESCRIPTION_UNRECOGNIZED_NAME
            sock.context = contexts[name]
            return None

        self.default.sni_callback = pick


@dataclass
class Watched:
    rules: dict[str, dict[str, Any]]  # title -> rule
    web: e2e.GraphiteWeb
    paths: dict[str, str]  # served name -> Graphite path

    def render(self, target: str, seconds: int) -> list[dict[str, Any]]:
        return self.web.render(target, f"-{seconds}s")

    def rule(self, name: str) -> dict[str, Any]:
        return self.rules[f"Certificate for {name} expires in under {expiry.ALERT_DAYS} days"]


def _program(name: str) -> str:
    path = find_program(name)
    if path is None:
        missing(f"program {name!r}")
    return str(path)


def _project(base: Path, https_port: int) -> Path:
    project = base / "project"
    project.mkdir()
    raw = yaml.safe_load(EXAMPLE.read_text())
    raw["edge"]["https_port"] = https_port
    raw["monitoring"]["interval"] = INTERVAL
    raw["backup"]["enabled"] = False
    for name in EXAMPLE_SECRETS:
        write_secret(project / "secrets" / name, f"example-{name}-value")
    config_path = project / "homelab.yaml"
    config_path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return config_path


def _server(directory: Path) -> _TlsServer:
    contexts = {}
    for name, days in DAYS.items():
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(*_certificate(name, days, directory))
        contexts[name] = context
    return _TlsServer(contexts)


@pytest.fixture(scope="module")
def watched(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Watched]:
    if os.geteuid() != 0:
        missing("root (collectd runs its exec programs as nobody)")
    programs = {name: _program(name) for name in ("collectd", "collectdctl", "carbon-cache", "openssl")}
    base = tmp_path_factory.mktemp("cert-expiry")
    # world-readable scratch dir for the program collectd runs as `nobody` (pytest's tmp dirs are 0700)
    shared = Path(tempfile.mkdtemp(prefix="homelab-cert-expiry-"))
    shared.chmod(0o755)
    server = _server(base)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    started: list[Any] = []
    try:
        plan = build_plan(load(_project(base, server.server_address[1])))
        rendering = render_all(plan, {f"secrets/{n}": f"example-{n}-value" for n in EXAMPLE_SECRETS})
        catalog = catalog_for(plan)
        files = {k: v.decode() for k, v in rendering.files.items() if k.startswith("monitoring/")}
        carbon = e2e.Carbon.from_rendering(programs["carbon-cache"], base / "graphite", rendering.files)
        web = e2e.GraphiteWeb(base / "web", carbon.storage, carbon.query_port)
        started.append(web)
        carbon.launch()
        started.append(carbon)
        program = shared / "cert-expiry"  # where the image installs expiry.PROGRAM, the rendered file's copy
        program.write_text(files["monitoring/collectd/cert-expiry"])
        program.chmod(0o755)
        exec_only = replace(catalog, plugins=tuple(p for p in catalog.plugins if p.name == "exec"))
        conf_text = collectd_conf(exec_only, carbon_port=carbon.line_port, socket=str(shared / "collectd.sock"))
        assert conf_text.count(f'"{expiry.PROGRAM}"') == 1, conf_text
        conf = base / "collectd.conf"
        conf.write_text(conf_text.replace(f'"{expiry.PROGRAM}"', f'"{program}"'))
        carbon.wait_listening()
        started.append(e2e.Collectd(programs["collectd"], conf, base / "collectd.log"))
        web.wait_ready()
        rules_file = yaml.safe_load(files["monitoring/grafana/provisioning/alerting/rules.yaml"])
        rules = {r["title"]: r for g in rules_file["groups"] for r in g["rules"]}
        paths = {s.plugin_instance: s.path for s in catalog.select(plugin=expiry.PLUGIN)}
        found = Watched(rules, web, paths)
        flush = [programs["collectdctl"], "-s", str(shared / "collectd.sock"), "flush"]

        def both_stored() -> bool:
            # write_graphite sends when its buffer is full; two values an interval would take minutes
            subprocess.run(flush, capture_output=True, timeout=10, check=True)
            return all(_days(found, name) for name in DAYS)

        e2e.wait_until(both_stored, 60, f"no days left in graphite-web; collectd log:\n{_log(base)}", step=0.5)
        yield found
    finally:
        for component in reversed(started):
            component.stop()
        server.shutdown()
        server.server_close()
        shutil.rmtree(shared, ignore_errors=True)


def _log(base: Path) -> str:
    return (base / "collectd.log").read_text(errors="replace")[-3000:]


def _days(watched: Watched, name: str) -> list[tuple[int, float]]:
    return e2e.points(watched.web.render(watched.paths[name], "-5min"))


def test_graphite_holds_the_days_left_of_each_served_certificate(watched: Watched) -> None:
    for name, days in DAYS.items():
        found = _days(watched, name)
        assert days - 1 < found[-1][1] <= days, (name, found)


def test_the_rule_fires_under_14_days_and_for_an_unreachable_name_only(watched: Watched) -> None:
    soon = grafana_eval.evaluate(watched.rule(SOON), watched.render)
    later = grafana_eval.evaluate(watched.rule(LATER), watched.render)
    unserved = grafana_eval.evaluate(watched.rule(UNSERVED), watched.render)
    assert soon.state == "Alerting", soon
    assert later.state == "Normal", later
    assert unserved.state == "Alerting", unserved  # the handshake is refused: no series at all
    assert _days(watched, UNSERVED) == []
    for name in DAYS:  # a name that answers is not "silent"
        silent = grafana_eval.evaluate(watched.rules[f"Certificate check for {name} silent"], watched.render)
        assert silent.state == "Normal", (name, silent)
