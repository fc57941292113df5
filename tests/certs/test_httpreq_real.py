"""DNS-01 through lego's httpreq provider with the REAL Traefik: the rendered static config (challenge dns,
provider httpreq, wildcard) and the rendered environment of the traefik service (HTTPREQ_ENDPOINT and the
credentials as HTTPREQ_USERNAME_FILE/HTTPREQ_PASSWORD_FILE, pointing at the user's secret files where the
container has /run/secrets/...), Pebble validating DNS-01 against pebble-challtestsrv, and the httpreq
endpoint of tests/certs/httpreq.py setting the TXT records in challtestsrv.

1. Traefik presents both challenges (apex and wildcard: one TXT name, two values) through the endpoint,
   Pebble issues the wildcard certificate, Traefik serves it and cleans both up.
2. A wrong password: the endpoint refuses (401), Traefik logs why, Pebble issues nothing.
The password is in no rendered file and no log.

Changed for the test: loopback entry points, the storage under tmp, Pebble as the CA (trusted through
LEGO_CA_CERTIFICATES), lego's DNS resolver set to challtestsrv (the TXT names are only there) with no
delay and no authoritative-server check, routes from the rendered labels through a file provider.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from cryptography import x509

from homelab.certs.policy import EXEC_PROGRAM as EXEC_PATH
from homelab.certs.policy import RESOLVER
from homelab.certs.store import UnreadableStore, read_resolvers
from homelab.config.loader import load
from homelab.engine.host import acme_json_path
from homelab.plan import build_plan
from homelab.plan_model import SECRETS_MOUNT
from homelab.render import render_all
from homelab.render.edge_traefik import dynamic_config, static_config
from homelab.secrets import user_secret_values
from tests.certs.edges_native import traefik_routes as routes
from tests.certs.httpreq import Endpoint, httpreq_config, httpreq_endpoint, provider_config
from tests.certs.pebbles import Ca, one
from tests.contract.edge_support import free_port, running, served_certificate, traefik_static_for_test, wait_until

pytestmark = pytest.mark.real
ISSUE_SECONDS = 90.0
PASSWORD = "httpreq-pass-8d2e4b7a91"
WILDCARD = frozenset({"example.com", "*.example.com"})


@pytest.fixture
def challtestsrv(tmp_path: Path, require_program: Callable[[str], str]) -> Iterator[tuple[str, str]]:
    """pebble-challtestsrv: (its DNS address, its management API's URL)."""
    dns, management = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    argv = [
        require_program("pebble-challtestsrv"), "-defaultIPv4", "127.0.0.1", "-defaultIPv6", "", "-dns01", dns,
        "-http01", "", "-https01", "", "-tlsalpn01", "", "-management", management,
    ]  # fmt: skip
    work = tmp_path / "challtestsrv"
    work.mkdir()
    with running(argv, work / "challtestsrv.log", work):
        yield dns, f"http://{management}"


class Edge:
    """The real Traefik with what homelab renders for `config` (DNS-01 through lego's `provider`): the
    provider's variables of the traefik service, a secret's or mount's container path replaced by its
    source here."""

    def __init__(self, tmp_path: Path, config: Path, provider: str, ca: Ca, dns: str, traefik: str) -> None:
        loaded = load(config)
        plan = build_plan(loaded)
        self.rendering = render_all(plan, user_secret_values(loaded))
        self.dir = tmp_path / "edge"
        (self.dir / "dynamic").mkdir(parents=True)
        static, self.ports = traefik_static_for_test(static_config(plan), self.dir)
        acme = acme_json_path(plan)
        assert acme is not None
        acme.parent.mkdir(parents=True)
        self.acme = acme
        resolver = static["certificatesResolvers"][RESOLVER]["acme"]
        resolver["storage"], resolver["caServer"] = str(acme), ca.directory
        assert resolver["dnsChallenge"]["provider"] == provider
        resolver["dnsChallenge"]["resolvers"] = [dns]
        resolver["dnsChallenge"]["propagation"] = {"delayBeforeChecks": "0s", "disableANSChecks": True}
        self.static = self.dir / "traefik.yml"
        self.static.write_text(yaml.safe_dump(static, sort_keys=False))
        (self.dir / "dynamic" / "dynamic.yml").write_text(yaml.safe_dump(dynamic_config(plan)))
        (self.dir / "dynamic" / "routes.yml").write_text(yaml.safe_dump(routes(plan)))
        compose = yaml.safe_load(self.rendering.files["edge/compose.yaml"])
        prefix = f"{provider.upper()}_"
        self.env = {k: v for k, v in compose["services"]["traefik"]["environment"].items() if k.startswith(prefix)}
        mounts = {m.target: m.source for m in plan.stacks["edge"].services["traefik"].mounts}
        env = {}
        for variable, value in self.env.items():
            secret = value.removeprefix(f"{SECRETS_MOUNT}/")
            env[variable] = plan.secrets[secret].source or "" if secret in plan.secrets else mounts.get(value, value)
        env["LEGO_CA_CERTIFICATES"] = str(ca.api_cert)
        env[f"{prefix}SEQUENCE_INTERVAL"] = "1"  # exec solves the apex and the wildcard 60 s apart
        self.log = tmp_path / "traefik.log"
        self.argv = ["/usr/bin/env", *[f"{k}={v}" for k, v in env.items()], traefik, f"--configFile={self.static}"]

    def held(self) -> list[frozenset[str]]:
        try:
            return [c.names for c in read_resolvers(self.acme).get(RESOLVER, [])]
        except UnreadableStore:
            return []  # Traefik is writing it

    def served(self, host: str) -> x509.Certificate:
        return served_certificate(self.ports["websecure"], host, timeout=5)


def _httpreq_edge(tmp_path: Path, endpoint: Endpoint, ca: Ca, dns: str, traefik: str, password: str) -> Edge:
    config = httpreq_config(tmp_path / "config", endpoint.url, password, ca_server=ca.directory)
    edge = Edge(tmp_path, config, "httpreq", ca, dns, traefik)
    assert set(edge.env) == {"HTTPREQ_ENDPOINT", "HTTPREQ_USERNAME_FILE", "HTTPREQ_PASSWORD_FILE"}
    return edge


def _programs(require_program: Callable[[str], str]) -> dict[str, str]:
    return {name: require_program(name) for name in ("openssl", "pebble", "pebble-challtestsrv")}


def test_wildcard_over_httpreq(
    tmp_path: Path, challtestsrv: tuple[str, str], require_program: Callable[[str], str]
) -> None:
    traefik = require_program("traefik")
    dns, management = challtestsrv
    with (
        one(_programs(require_program), tmp_path / "pebble", dns) as ca,
        httpreq_endpoint(PASSWORD, management) as endpoint,
    ):
        edge = _httpreq_edge(tmp_path, endpoint, ca, dns, traefik, PASSWORD)
        with running(edge.argv, edge.log, tmp_path) as process:
            wait_until(lambda: WILDCARD in edge.held(), "the wildcard certificate", process, edge.log, ISSUE_SECONDS)
            for host in ("example.com", "cloud.example.com"):
                wait_until(lambda host=host: edge.served(host).issuer == ca.intermediate,
                           f"Traefik to serve {host}", process, edge.log)  # fmt: skip
            wait_until(lambda: len(endpoint.calls) == 4, "both cleanups", process, edge.log)
        assert ca.issued() == 1
    assert endpoint.refused == []
    fqdn = "_acme-challenge.example.com."
    presented = [body for path, body in endpoint.calls if path == "/present"]
    cleaned = [body for path, body in endpoint.calls if path == "/cleanup"]
    assert {b["fqdn"] for b in presented} == {fqdn} and len({b["value"] for b in presented}) == 2
    assert sorted(b["value"] for b in cleaned) == sorted(b["value"] for b in presented)
    assert {b["fqdn"] for b in cleaned} == {fqdn}
    _password_nowhere(tmp_path, edge)


def test_a_wrong_password_issues_nothing(
    tmp_path: Path, challtestsrv: tuple[str, str], require_program: Callable[[str], str]
) -> None:
    traefik = require_program("traefik")
    dns, management = challtestsrv
    with (
        one(_programs(require_program), tmp_path / "pebble", dns) as ca,
        httpreq_endpoint(PASSWORD, management) as endpoint,
    ):
        edge = _httpreq_edge(tmp_path, endpoint, ca, dns, traefik, "not-the-password")
        with running(edge.argv, edge.log, tmp_path) as process:
            wait_until(lambda: "Unable to obtain ACME certificate" in edge.log.read_text(), "issuance to fail",
                       process, edge.log, ISSUE_SECONDS)  # fmt: skip
        log = edge.log.read_text()
        assert "error presenting token (example.com): httpreq: unexpected status code: [status code: 401]" in log
        assert ca.issued() == 0 and edge.held() == []
    assert endpoint.calls == [] and endpoint.refused
    assert all("wrong or no Basic auth" in why for why in endpoint.refused)
    assert "not-the-password" not in log
    _password_nowhere(tmp_path, edge)


def _password_nowhere(tmp_path: Path, edge: Edge) -> None:
    assert all(PASSWORD.encode() not in content for content in edge.rendering.files.values())
    for path in [edge.static, edge.log, *edge.dir.rglob("*.yml"), *(tmp_path / "pebble").glob("*.log")]:
        assert PASSWORD not in path.read_text(errors="replace"), path


# lego's exec contract (providers/dns/exec/exec.go): `<program> present|cleanup <fqdn> <value>`, exit 0
EXEC_PROGRAM = r"""#!/bin/sh
set -eu
[ $# -eq 3 ] || { echo "usage: $0 present|cleanup fqdn value" >&2; exit 2; }
echo "$1 $2 $3" >> @CALLS@
case "$1" in
  present) body="{\"host\": \"$2\", \"value\": \"$3\"}"; path=set-txt ;;
  cleanup) body="{\"host\": \"$2\"}"; path=clear-txt ;;
  *) exit 2 ;;
esac
@PYTHON@ -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], sys.argv[2].encode(), timeout=5)' \
  "@MANAGEMENT@/$path" "$body"
echo "$1 done for $2"
"""


def test_wildcard_over_exec(
    tmp_path: Path, challtestsrv: tuple[str, str], require_program: Callable[[str], str]
) -> None:
    traefik = require_program("traefik")
    dns, management = challtestsrv
    calls = tmp_path / "calls"
    with one(_programs(require_program), tmp_path / "pebble", dns) as ca:
        config = provider_config(tmp_path / "config", "exec", {"program": "hooks/acme-dns"}, ca_server=ca.directory)
        program = config.parent / "hooks" / "acme-dns"
        program.parent.mkdir()
        values = {"@CALLS@": str(calls), "@PYTHON@": sys.executable, "@MANAGEMENT@": management}
        text = EXEC_PROGRAM
        for placeholder, value in values.items():
            text = text.replace(placeholder, value)
        program.write_text(text)
        program.chmod(0o755)
        edge = Edge(tmp_path, config, "exec", ca, dns, traefik)
        assert edge.env == {"EXEC_PATH": EXEC_PATH}
        with running(edge.argv, edge.log, tmp_path) as process:
            wait_until(lambda: WILDCARD in edge.held(), "the wildcard certificate", process, edge.log, ISSUE_SECONDS)
            wait_until(lambda: edge.served("cloud.example.com").issuer == ca.intermediate, "Traefik to serve it",
                       process, edge.log)  # fmt: skip
            wait_until(lambda: len(calls.read_text().splitlines()) == 4, "both cleanups", process, edge.log)
        assert ca.issued() == 1
    lines = [line.split() for line in calls.read_text().splitlines()]
    assert sorted(verb for verb, _, _ in lines) == ["cleanup", "cleanup", "present", "present"]
    assert {fqdn for _, fqdn, _ in lines} == {"_acme-challenge.example.com."}
    assert "present done for _acme-challenge.example.com." in edge.log.read_text()  # its output, in Traefik's log
