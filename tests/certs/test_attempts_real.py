"""What `homelab certs` and `up` make of real failed orders, from the edges as rendered (edges_native.py)
against a real BIND named and a Pebble validating through it:
1. a name the update-policy refuses: `homelab certs` shows, for that name, the edge's own words, when, and
   when it tries again (Traefik: at a restart or a router change; certbot: on its loop), read from the
   edge's log; the other names are served;
2. the DNS server going away while an order's record is in the zone, the edge dying with it: the record
   stays in the zone; the cleanup `up` runs before it applies removes it once the server is back."""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import dns.message
import dns.query
import dns.rdatatype
import pytest
from typer.testing import CliRunner

from homelab.certs import attempts, challenges
from homelab.cli import app
from homelab.config.loader import load
from homelab.engine.host import acme_json_path
from homelab.layout import EDGE_STACK, project_name
from homelab.plan import build_plan
from homelab.runtime import docker as docker_module
from tests.certs.conftest import dns01_config
from tests.certs.edges_native import certbot_loop, traefik_held, traefik_running
from tests.certs.named import HOSTS, Named, named, restarted
from tests.certs.pebbles import Ca, one
from tests.conftest import find_program, missing
from tests.contract.edge_support import wait_until
from tests.fakes.docker import FakeDocker, container

pytestmark = pytest.mark.real
WAIT = 40.0
APPS = [h for h in HOSTS if h and h != "home"]


def _program(name: str) -> str:
    path = find_program(name)
    if path is None:
        missing(f"program {name!r}")
    assert path is not None
    return path


@contextlib.contextmanager
def _server_and_ca(work: Path, grants: tuple[str, ...] | None = None) -> Iterator[tuple[Named, Ca]]:
    programs = {name: _program(name) for name in ("openssl", "pebble", "pebble-challtestsrv")}
    with (
        named(_program("named"), work / "named", grants=grants) as server,
        one(programs, work / "ca", server.address) as ca,
    ):
        yield server, ca


def _txt(server: Named, name: str) -> list[str]:
    answer = dns.query.tcp(dns.message.make_query(name, "TXT"), "127.0.0.1", port=server.port, timeout=2)
    return [r.to_text() for rrset in answer.answer if rrset.rdtype == dns.rdatatype.TXT for r in rrset]


def _certs_cli(config: Path, service: str, log: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, dict[str, object]]:
    """`homelab certs --json`, the engine's edge container logging `log`."""
    fake = FakeDocker(container(project_name(EDGE_STACK), service, id="edge1"))
    fake.logs["edge1"] = log
    monkeypatch.setattr(docker_module, "Docker", lambda: fake)
    result = CliRunner().invoke(app, ["certs", "--config", str(config), "--json"])
    assert result.exit_code == 1, result.output  # a name has an error
    return {row["name"]: row for row in json.loads(result.stdout)}


def test_traefik_refused_name_shows_in_certs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    allowed = tuple(f"_acme-challenge.{app}.example.com" for app in APPS if app != "git")
    with _server_and_ca(tmp_path, allowed) as (server, ca):
        config = dns01_config(
            tmp_path / "config", server.port, server.secret, wildcard=False, ca_server=ca.directory,
            ca_bundle=ca.api_cert,
        )  # fmt: skip
        with traefik_running(config, _program("traefik"), tmp_path / "edge") as (process, log, acme):
            refused = "Unable to obtain ACME certificate"
            wait_until(lambda: refused in log.read_text() and len(traefik_held(acme)) == len(APPS) - 1,
                       "git refused, the others issued", process, log, WAIT)  # fmt: skip
    store = acme_json_path(build_plan(load(config)))
    assert store is not None
    store.parent.mkdir(parents=True)
    shutil.copy(acme, store)  # where homelab reads Traefik's store
    rows = _certs_cli(config, "traefik", log.read_text(), monkeypatch)
    git = rows["git.example.com"]
    assert str(git["last_error"]).startswith("failed 20")
    assert str(git["last_error"]).endswith(
        " UTC: git.example.com: dns01: error presenting token (git.example.com): dnsupdate: failed to insert: DNS "
        f"update failed: server 127.0.0.1:{server.port} replied REFUSED for INSERT example.com."
    ), git
    assert git["next_try"] == "when Traefik restarts or its routers change (`homelab up` after the fix)"
    assert (rows["plex.example.com"]["last_error"], rows["plex.example.com"]["next_try"]) == ("", "")
    assert rows["plex.example.com"]["ca"] == "test"


def test_certbot_refused_name_shows_in_certs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the wildcard's TXT name is refused: every name it would serve shows why
    with _server_and_ca(tmp_path, ("_acme-challenge.plex.example.com",)) as (server, ca):
        config = dns01_config(
            tmp_path / "config", server.port, server.secret, edge="nginx", ca_server=ca.directory,
            ca_bundle=ca.api_cert,
        )  # fmt: skip
        with certbot_loop(config, _program("certbot"), tmp_path / "edge") as (process, out, _le):
            wait_until(lambda: "certbot: example.com failed at " in out.read_text(), "certbot to fail", process, out,
                       WAIT)  # fmt: skip
            started = time.time()
    rows = _certs_cli(config, "certbot", out.read_text(), monkeypatch)
    for app_name in APPS:
        row = rows[f"{app_name}.example.com"]
        assert str(row["last_error"]).endswith(" UTC: Received response from server: REFUSED"), row
        # certbot.sh tries again on its loop: 3600 s in this test (12h as rendered)
        next_try = time.strftime("%Y-%m-%d %H:%M", time.gmtime(started + 3600))
        assert str(row["next_try"])[:15] == next_try[:15] and str(row["next_try"]).endswith(" UTC (certbot's loop)")


def test_dns_outage_mid_order_leaves_a_record_the_next_up_removes(tmp_path: Path) -> None:
    with _server_and_ca(tmp_path) as (server, ca):
        config = dns01_config(
            tmp_path / "config", server.port, server.secret, ca_server=ca.directory, ca_bundle=ca.api_cert
        )
        plan = build_plan(load(config))
        name = "_acme-challenge.example.com"
        with traefik_running(config, _program("traefik"), tmp_path / "edge") as (process, log, _acme):
            wait_until(lambda: _txt(server, name) != [], "lego to write its record", process, log, WAIT)
            # the outage: named stops while the record is in the zone, and the box with the edge goes down
            # with it (Traefik killed: no cleanup after it)
            server.process.send_signal(signal.SIGTERM)
            process.kill()
            assert (server.process.wait(10), process.wait(10)) == (0, -signal.SIGKILL)
            edge_log = log.read_text()
    assert "dns01: trying to solve the challenge." in edge_log
    assert attempts.in_flight(plan, edge_log)  # while it ran, the record was live: kept
    with restarted(_program("named"), server):
        assert _txt(server, name) != []  # the outage's leftover, back with the server
        # `up` runs this first (homelab/up.py, with the engine's edge_log): the edge is not running, so its log is empty
        assert challenges.remove_stale(plan, "", dry_run=True)[0].startswith(
            f"certificates: would remove 1 challenge TXT record at {name}"
        )
        assert _txt(server, name) != []
        lines = challenges.remove_stale(plan, "", dry_run=False)
        assert lines == [f"certificates: removed 1 challenge TXT record at {name}, left by a failed order"]
        assert _txt(server, name) == []
        assert challenges.remove_stale(plan, "", dry_run=False) == []  # nothing left
