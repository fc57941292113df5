"""Contract: `homelab certs` reads lineages the REAL certbot wrote, issued by Pebble (an ACME test CA)
over a real HTTP-01 validation (certbot's standalone server on a loopback port), one renewal included."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from homelab.certs.ledger import Ledger
from homelab.certs.name_status import name_statuses
from homelab.certs.store import read_certbot
from tests.contract.edge_support import free_port
from tests.contract.test_edge_nginx_certbot import pebble, pebble_plan

pytestmark = pytest.mark.real
NAME = "cloud.example.com"


def test_certbot_lineage_from_pebble(tmp_path: Path, require_program: Callable[[str], str]) -> None:
    programs = {name: require_program(name) for name in ("openssl", "pebble", "pebble-challtestsrv")}
    certbot = require_program("certbot")
    api, mgmt, http_port = free_port(), free_port(), free_port()
    directory = f"https://127.0.0.1:{api}/dir"
    plan = pebble_plan(tmp_path / "example", directory)
    le = tmp_path / "letsencrypt"
    (tmp_path / "pebble").mkdir()
    with pebble(programs, tmp_path / "pebble", api, mgmt, http_port):
        argv = [certbot, "certonly", "--non-interactive", "--agree-tos", "--email", "a@example.com"]
        argv += ["--standalone", "--http-01-address", "127.0.0.1", "--http-01-port", str(http_port)]
        argv += ["--server", directory, "--cert-name", NAME, "-d", NAME, "--config-dir", str(le)]
        argv += ["--work-dir", str(tmp_path / "work"), "--logs-dir", str(tmp_path / "logs")]
        env = {"REQUESTS_CA_BUNDLE": str(tmp_path / "pebble" / "pebble.pem"), "PATH": "/usr/bin:/bin"}
        for extra in ([], ["--force-renewal"]):
            done = subprocess.run([*argv, *extra], capture_output=True, text=True, timeout=120, env=env)
            assert done.returncode == 0, done.stdout + done.stderr

    holdings = read_certbot(le)
    assert [sorted(c.names) for c in holdings.served] == [[NAME]]
    assert len(holdings.history) == 2  # the first order and the renewal
    assert len({c.serial for c in holdings.history}) == 2
    served = holdings.served[0]
    assert served.issuer.startswith("Pebble Intermediate CA")
    assert (served.ca, served.challenge) == ("test", "http-01")
    assert served.serial in {c.serial for c in holdings.history}

    rows = {r.name: r for r in name_statuses(plan, holdings, Ledger(tmp_path / "l.json", [], []), datetime.now(UTC))}
    cloud = rows[NAME]
    assert (cloud.ca, cloud.challenge, cloud.last_error, cloud.orders_7d) == ("test", "http-01", "", 2)
    assert cloud.days_left is not None and cloud.days_left > 0
    assert rows["plex.example.com"].last_error == "no certificate yet"
