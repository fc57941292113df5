"""`up` with staging first on the Traefik edge, with the Docker Engine and ZFS replaced by the recording
fakes (the real Traefik's side - its acme.json, its log lines - is proven in test_staging_traefik.py):
the sets staging issued are promoted and the edge restarted on the production resolver in the same `up`;
a set staging refused stays on staging, said so with the CA's error."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from homelab.certs import staging, switch
from homelab.certs.ledger import Order, ledger_path, load_ledger
from homelab.certs.policy import RESOLVER, STAGING_RESOLVER
from homelab.certs.store import read_resolvers
from homelab.cli import app
from homelab.config.loader import load
from homelab.engine import compose as apply
from homelab.engine.host import acme_json_path
from homelab.errors import Refused
from homelab.plan import build_plan
from homelab.runtime import docker as docker_module
from tests.certs.conftest import LE_STAGING, NOW, STAGING, make_cert
from tests.certs.test_staging import _acme
from tests.fakes.docker import FakeDocker, container
from tests.fakes.zfs import FakeZfs

STARTED = "INF Testing certificate renew... acmeCA=https://acme-staging-v02.api.letsencrypt.org/directory providerName=le-staging.acme\n"  # noqa: E501
REFUSED = (
    '\x1b[31mERR\x1b[0m Unable to obtain ACME certificate for domains error="unable to generate a certificate for the '
    'domains [git.example.com]: acme: error: 403 :: urn:ietf:params:acme:error:unauthorized :: Connection refused" '
    'ACME CA=https://acme-staging-v02.api.letsencrypt.org/directory domains=["git.example.com"] '
    "providerName=le-staging.acme routerName=gitea@docker rule=Host(`git.example.com`)\n"
)


class EdgeLog(FakeDocker):
    """The fake engine, its Traefik container logging `log`."""

    def __init__(self) -> None:
        super().__init__()
        self.log = ""

    def logs_tail(self, container_id: str, count: int) -> str:
        super().logs_tail(container_id, count)
        return self.log


@pytest.fixture
def engine(monkeypatch: pytest.MonkeyPatch) -> EdgeLog:
    fake = EdgeLog()
    monkeypatch.setattr(docker_module, "Docker", lambda: fake)
    monkeypatch.setattr(apply, "ZfsCli", FakeZfs)
    return fake


def _resolvers(out: Path) -> dict[str, str]:
    found = {}
    for stack in ("cloud", "dev", "media", "monitoring"):
        for service in yaml.safe_load((out / stack / "compose.yaml").read_text())["services"].values():
            for key, value in (service.get("labels") or {}).items():
                if key.startswith("traefik.http.") and key.endswith(".rule"):
                    host = value.removeprefix("Host(`").removesuffix("`)")
                    found[host] = service["labels"][key.removesuffix(".rule") + ".tls.certresolver"]
    return found


def test_up_promotes_what_staging_issued_and_restarts_the_edge(
    example_config: Path, tmp_path: Path, engine: EdgeLog
) -> None:
    text = example_config.read_text().replace("mountpoint: /tank/homelab", f"mountpoint: {tmp_path}/tank")
    example_config.write_text(text)
    plan = build_plan(load(example_config))
    acme = acme_json_path(plan)
    assert acme is not None
    hosts = sorted(r.host for r in plan.routes)
    issued = [h for h in hosts if h != "git.example.com"]
    _acme(acme, {STAGING_RESOLVER: (LE_STAGING, [make_cert([h], STAGING) for h in issued])})
    engine.log = STARTED + REFUSED
    out = tmp_path / "stacks"

    result = CliRunner().invoke(app, ["up", "--config", str(example_config), "--out", str(out), "--timeout", "5"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert any(line.startswith("certificates: staging issued ") for line in lines)
    for host in issued:
        assert f"certificates: {host}: staging issued it; the edge now orders it from production" in lines
    assert (
        "certificates: staging refused git.example.com, production not asked: unable to generate a certificate for "
        "the domains [git.example.com]: acme: error: 403 :: urn:ietf:params:acme:error:unauthorized :: Connection "
        "refused (see `homelab certs check`)"
    ) in lines
    # the edge went down before acme.json changed, then everything came up on the new routers
    changes = engine.changes()
    down = changes.index(("down", "homelab-edge", out / "edge"))
    assert ("up", "homelab-edge") in changes[down:]
    assert read_resolvers(acme)[STAGING_RESOLVER] == []
    assert json.loads(acme.read_text())[STAGING_RESOLVER]["Account"]["Registration"]["uri"] == LE_STAGING
    ledger = load_ledger(ledger_path(plan))
    assert sorted(h for s in ledger.staged for h in s.names) == issued
    assert sorted(h for o in ledger.requested for h in o.names) == issued  # the guard counted them
    assert _resolvers(out) == {h: (STAGING_RESOLVER if h == "git.example.com" else RESOLVER) for h in hosts}


def test_a_set_staging_has_not_answered_is_waited_for_then_told(
    example_config: Path, tmp_path: Path, engine: EdgeLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(staging, "POLL_SECONDS", 0.01)
    text = example_config.read_text().replace("mountpoint: /tank/homelab", f"mountpoint: {tmp_path}/tank")
    example_config.write_text(text)
    engine.running.append(container("homelab-edge", "traefik"))
    engine.log = STARTED
    lines = switch.after_up(
        load(example_config), build_plan(load(example_config)), tmp_path / "stacks", engine, timeout=0.2
    )
    assert (
        "certificates: staging has not answered for git.example.com yet; production is asked by the `homelab up` "
        "after it issued"
    ) in lines
    assert len(lines) == 6  # every served name
    assert sum(1 for c in engine.calls if c[0] == "logs_tail") > 3  # it watched the log meanwhile
    assert engine.changes() == []


def test_the_guard_refuses_the_switch_past_a_budget(example_config: Path, tmp_path: Path, engine: EdgeLog) -> None:
    text = example_config.read_text().replace("mountpoint: /tank/homelab", f"mountpoint: {tmp_path}/tank")
    example_config.write_text(text)
    plan = build_plan(load(example_config))
    acme = acme_json_path(plan)
    assert acme is not None
    _acme(acme, {STAGING_RESOLVER: (LE_STAGING, [make_cert(["cloud.example.com"], STAGING)])})
    ledger = load_ledger(ledger_path(plan))
    ledger.issued += [Order(frozenset({"cloud.example.com"}), NOW - timedelta(days=1), f"s{i}") for i in range(4)]
    ledger.save()
    engine.running.append(container("homelab-edge", "traefik"))
    engine.log = STARTED
    with pytest.raises(Refused, match=re.escape("names cloud.example.com: 4 in the last 7 days")):
        switch.after_up(load(example_config), build_plan(load(example_config)), tmp_path / "stacks", engine, timeout=0)
    assert engine.changes() == []  # the edge keeps running on staging
    assert read_resolvers(acme)[STAGING_RESOLVER] != []
