"""Staging first and DNS-01 with the NGINX edge's REAL certbot: the rendered certbot.sh (challenge dns
through RFC 2136, wildcard, Pebble x2 as staging and production) against a real BIND named.

1. A wildcard certificate (the domain and *.domain) is first issued by the staging Pebble (certbot's
   --dry-run: nothing saved), then by production; certbot.sh installs it for every served name.
2. When staging cannot validate (its Pebble asks a DNS server without the TXT record), production is never
   contacted: certbot holds no account there and production issued nothing.
The TSIG secret is in no rendered file, no output and no certbot log; certbot's credentials INI is 0600.

Changed for the test: certbot's folders and trust (a `certbot` wrapper on PATH), the INI's path and the
loop's waits.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from homelab.certs.ledger import Ledger
from homelab.certs.name_status import name_statuses
from homelab.certs.store import read_certbot
from homelab.config.loader import load
from homelab.plan import build_plan
from homelab.render import edge_nginx
from tests.certs.conftest import dns01_config
from tests.certs.named import Named, named
from tests.certs.pebbles import Ca, bundle, staging_and_production
from tests.contract.edge_support import first_certificate, running, wait_until

pytestmark = pytest.mark.real
ISSUE_SECONDS = 90.0
WILDCARD = {"example.com", "*.example.com"}

CERTBOT_WRAPPER = """#!/bin/sh
export REQUESTS_CA_BUNDLE="{bundle}"
exec "{certbot}" --config-dir "{le}" --work-dir "{work}/certbot-work" --logs-dir "{work}/certbot-logs" "$@"
"""


@pytest.fixture
def server(tmp_path: Path, require_program: Callable[[str], str]) -> Iterator[Named]:
    with named(require_program("named"), tmp_path / "named") as running_named:
        yield running_named


class Loop:
    """certbot.sh rendered for the plan, running with the real certbot."""

    def __init__(self, tmp_path: Path, server: Named, staging: Ca, production: Ca, certbot: str) -> None:
        config = dns01_config(
            tmp_path / "config", server.port, server.secret, edge="nginx",
            ca_server=production.directory, staging_ca_server=staging.directory,
        )  # fmt: skip
        self.plan = build_plan(load(config))
        self.le = tmp_path / "letsencrypt"
        self.le.mkdir(mode=0o700)
        self.edge_dir = self.le / "edge"
        self.credentials = tmp_path / "rfc2136.ini"
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        wrapper = CERTBOT_WRAPPER.format(
            bundle=bundle(tmp_path / "bundle.pem", staging, production), certbot=certbot, le=self.le, work=tmp_path
        )
        (bin_dir / "certbot").write_text(wrapper)
        (bin_dir / "certbot").chmod(0o755)
        self.script = tmp_path / "certbot.sh"
        self.script.write_text(
            edge_nginx.certbot_sh(
                self.plan, config_dir=str(self.le), edge_dir=str(self.edge_dir), first_wait=0, interval="3600",
                credentials=str(self.credentials),
            )
        )  # fmt: skip
        self.out = tmp_path / "certbot.out"
        self.argv = [
            "/usr/bin/env", f"PATH={bin_dir}:{os.environ['PATH']}", f"RFC2136_TSIG_SECRET_FILE={server.secret_file}",
            "/bin/sh", str(self.script),
        ]  # fmt: skip
        self.hosts = [r.host for r in self.plan.routes]
        self.work = tmp_path

    def secret_nowhere(self, secret: str) -> None:
        logs = list((self.work / "certbot-logs").glob("*"))
        for path in [self.script, self.out, *logs]:
            assert secret not in path.read_text(errors="replace"), path
        assert self.credentials.stat().st_mode & 0o777 == 0o600


def test_staging_then_production_wildcard_over_rfc2136(
    tmp_path: Path, server: Named, require_program: Callable[[str], str]
) -> None:
    certbot = require_program("certbot")
    with staging_and_production(require_program, tmp_path / "pebbles", server.address) as (staging, production):
        loop = Loop(tmp_path, server, staging, production, certbot)

        def installed() -> bool:
            return all(
                first_certificate(loop.edge_dir / h / "fullchain.pem").issuer == production.intermediate
                for h in loop.hosts
            )

        with running(loop.argv, loop.out, tmp_path) as process:
            wait_until(installed, "the production wildcard certificate", process, loop.out, ISSUE_SECONDS)
        assert (staging.issued(), production.issued()) == (1, 1)

    out = loop.out.read_text()
    staged = out.index("certbot: example.com: staging issued it, asking production")
    assert "failed" not in out
    assert out.index("certificate installed for NGINX") > staged
    # certbot talked to both: an account at each, the staging one first
    accounts = loop.le / "accounts"
    assert (accounts / staging.account_folder).is_dir() and (accounts / production.account_folder).is_dir()
    holdings = read_certbot(loop.le)
    assert [c.names for c in holdings.served] == [frozenset(WILDCARD)]
    assert (holdings.served[0].challenge, holdings.served[0].ca) == ("dns-01", "test")
    served = first_certificate(loop.edge_dir / "cloud.example.com" / "fullchain.pem")
    assert served == first_certificate(loop.le / "live" / "example.com" / "fullchain.pem")
    rows = name_statuses(loop.plan, holdings, Ledger(tmp_path / "l.json", [], []), datetime.now(UTC))
    assert {(r.name, r.challenge, r.last_error) for r in rows} == {(h, "dns-01", "") for h in loop.hosts}
    loop.secret_nowhere(server.secret)


def test_staging_failure_never_reaches_production(
    tmp_path: Path, server: Named, require_program: Callable[[str], str]
) -> None:
    certbot = require_program("certbot")
    pebbles = staging_and_production(require_program, tmp_path / "pebbles", server.address, staging_fails=True)
    with pebbles as (staging, production):
        loop = Loop(tmp_path, server, staging, production, certbot)
        failed = "certbot: example.com: staging failed, production not asked; retrying later"
        with running(loop.argv, loop.out, tmp_path) as process:
            wait_until(lambda: failed in loop.out.read_text(), "staging to fail", process, loop.out, ISSUE_SECONDS)
        assert (staging.issued(), production.issued()) == (0, 0)
        assert "Issued" not in production.log.read_text() and "new-order" not in production.log.read_text()

    accounts = loop.le / "accounts"
    assert (accounts / staging.account_folder).is_dir()
    assert not (accounts / production.account_folder).exists()  # certbot never asked production anything
    assert not (loop.le / "live").exists()
    for host in loop.hosts:  # NGINX keeps serving the placeholders
        certificate = first_certificate(loop.edge_dir / host / "fullchain.pem")
        assert certificate.issuer == certificate.subject
    loop.secret_nowhere(server.secret)
