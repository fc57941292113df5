"""Contract: the NGINX edge's certificate life cycle with the REAL certbot against Pebble (an ACME test
CA), HTTP-01 through the rendered nginx.conf's webroot location.

The rendered certbot.sh writes self-signed placeholders, the rendered run.sh starts the real NGINX on
them, the real certbot obtains a certificate per name from Pebble, certbot.sh copies them into the
served folder and bumps the serial, run.sh reloads NGINX, which then serves chains that verify against
Pebble's root; a forced `certbot renew` (the loop's own renew call) leads to a newer certificate.

Changed for the test, besides what tests/contract/test_edge_nginx.py changes: the ACME server (Pebble
on 127.0.0.1), the webroot (a folder the unprivileged workers can read), certbot's folders and trust
(a `certbot` on PATH adding --config-dir/--work-dir/--logs-dir and trusting Pebble's API certificate,
see CERTBOT_WRAPPER), and short waits.
Pebble validates HTTP-01 on NGINX's loopback port (`httpPort`), finding every name at 127.0.0.1
through pebble-challtestsrv's DNS. Everything listens on 127.0.0.1 only.
"""

from __future__ import annotations

import contextlib
import json
import os
import ssl
import subprocess
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from homelab.config.loader import load
from homelab.plan import build_plan
from homelab.plan_model import Plan
from homelab.render import edge_nginx
from tests.conftest import EXAMPLE, EXAMPLE_SECRETS, REPO, write_secret
from tests.contract.edge_contract import CLOUD
from tests.contract.edge_support import (
    Edge,
    LocalCA,
    first_certificate,
    free_port,
    https,
    nginx_edge,
    nginx_worker_user,
    running,
    scratch_folder,
    wait_until,
    worker_users,
)

pytestmark = pytest.mark.real

ISSUE_SECONDS = 45.0  # six names, one HTTP-01 validation each (~3 s apiece here)

# certbot on PATH for certbot.sh: the real one with the test's folders and trust. It first waits for
# {ready}: until NGINX is up on the placeholders and Pebble answers (the production loop's first_wait,
# made deterministic). A `renew` after the test wrote the name of a certificate into {force} renews
# that one now (once: the flag is consumed).
CERTBOT_WRAPPER = """#!/bin/sh
until [ -e "{ready}" ]; do sleep 0.1; done
if [ "$1" = renew ] && [ -s "{force}" ]; then
    name=$(cat "{force}")
    rm -f "{force}"
    set -- "$@" --force-renewal --cert-name "$name"
fi
# renew sleeps up to 8 minutes first when stdin is no terminal (spreading cron jobs): not here
if [ "$1" = renew ]; then set -- "$@" --no-random-sleep-on-renew; fi
export REQUESTS_CA_BUNDLE="{api_cert}"
exec "{certbot}" --config-dir "{le}" --work-dir "{work}/certbot-work" --logs-dir "{work}/certbot-logs" "$@"
"""


def pebble_plan(folder: Path, directory: str) -> Plan:
    """The bundled example with the NGINX edge (HTTP-01) and Pebble as the ACME server."""
    folder.mkdir(parents=True)
    data = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    data["edge"]["kind"] = "nginx"
    data["domain"]["acme"]["challenge"] = "http"
    data["domain"]["acme"]["ca_server"] = directory
    (folder / "homelab.yaml").write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    for name in EXAMPLE_SECRETS:
        write_secret(folder / "secrets" / name, f"example-{name}-value")
    return build_plan(load(folder / "homelab.yaml"))


@contextlib.contextmanager
def pebble(
    programs: dict[str, str], work: Path, api: int, mgmt: int, http_port: int, dns: str | None = None
) -> Iterator[Path]:
    """Pebble's ACME API on 127.0.0.1:`api` (HTTPS with a certificate made here, `work/pebble.pem`),
    validating HTTP-01 on 127.0.0.1:`http_port`: pebble-challtestsrv answers every name with
    127.0.0.1 (and no TXT record), unless `dns` (host:port) names the DNS server Pebble asks instead.
    Yields the file with Pebble's issuing root (/roots/0); the processes stop on exit."""
    key, cert = work / "pebble.key", work / "pebble.pem"
    argv = [programs["openssl"], "req", "-x509", "-nodes", "-days", "30", "-newkey", "ec"]
    argv += ["-pkeyopt", "ec_paramgen_curve:P-256", "-subj", "/CN=pebble"]
    argv += ["-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)]
    check = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert check.returncode == 0, check.stderr
    config = {
        "listenAddress": f"127.0.0.1:{api}",
        "managementListenAddress": f"127.0.0.1:{mgmt}",
        "certificate": str(work / "pebble.pem"),
        "privateKey": str(work / "pebble.key"),
        "httpPort": http_port,
        "tlsPort": free_port(),  # nothing listens there: only HTTP-01 is offered to Pebble
        "ocspResponderURL": "",
        "externalAccountBindingRequired": False,
    }
    (work / "pebble.json").write_text(json.dumps({"pebble": config}))
    port = free_port()
    dns_argv = [
        programs["pebble-challtestsrv"], "-defaultIPv4", "127.0.0.1", "-defaultIPv6", "", "-dns01", f"127.0.0.1:{port}",
        "-http01", "", "-https01", "", "-tlsalpn01", "", "-management", f"127.0.0.1:{free_port()}",
    ]  # fmt: skip
    # no sleeping before validations, no nonce rejections, a fresh HTTP-01 validation for every order
    ca_argv = [
        "/usr/bin/env", "PEBBLE_VA_NOSLEEP=1", "PEBBLE_WFE_NONCEREJECT=0", "PEBBLE_AUTHZREUSE=0",
        programs["pebble"], "-config", str(work / "pebble.json"), "-dnsserver", dns or f"127.0.0.1:{port}",
    ]  # fmt: skip
    log = work / "pebble.log"
    with contextlib.ExitStack() as stack:
        if dns is None:
            stack.enter_context(running(dns_argv, work / "challtestsrv.log", work))
        ca = stack.enter_context(running(ca_argv, log, work))
        context = ssl.create_default_context(cafile=str(work / "pebble.pem"))

        def root() -> bytes:
            with urllib.request.urlopen(f"https://127.0.0.1:{mgmt}/roots/0", context=context, timeout=2) as answer:
                return answer.read()

        wait_until(lambda: b"BEGIN CERTIFICATE" in root(), "pebble", ca, log)
        (work / "pebble-root.pem").write_bytes(root())
        yield work / "pebble-root.pem"


def verifies(edge: Edge, host: str, root: Path) -> bool:
    """A handshake for `host` verified against Pebble's root (LAN-only names answer 403 afterwards)."""
    try:
        return https(edge.https_port, host, ca_file=root).status in (200, 403)
    except ssl.SSLCertVerificationError:
        return False


def test_real_certbot_against_pebble_placeholders_issue_reload_and_renewal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, require_program: Callable[[str], str]
) -> None:
    programs = {name: require_program(name) for name in ("nginx", "openssl", "pebble", "pebble-challtestsrv")}
    certbot = require_program("certbot")
    api, mgmt = free_port(), free_port()
    plan = pebble_plan(tmp_path / "example", f"https://127.0.0.1:{api}/dir")
    hosts = [r.host for r in plan.routes]
    le, bin_dir = tmp_path / "letsencrypt", tmp_path / "bin"
    edge_dir = le / "edge"
    le.mkdir(mode=0o700)
    bin_dir.mkdir()
    ready, force = tmp_path / "ca-ready", tmp_path / "force-renewal"
    out = tmp_path / "certbot.out"

    with scratch_folder() as scratch:
        # the challenge files certbot writes must be readable by the unprivileged workers: the folder as
        # `storage apply` makes the webroot dataset (0750, owner and group from the catalog), not a friendlier one
        webroot = scratch / "webroot"
        webroot.mkdir(mode=0o750)
        owner = yaml.safe_load((REPO / "compose" / "edge-nginx.yaml").read_text())["datasets"]["webroot"]
        if os.geteuid() == 0:
            os.chown(webroot, owner["uid"], owner["gid"])
        monkeypatch.setattr(edge_nginx, "WEBROOT", str(webroot))
        wrapper = CERTBOT_WRAPPER.format(
            ready=ready, force=force, api_cert=tmp_path / "pebble" / "pebble.pem", certbot=certbot, le=le, work=tmp_path
        )
        (bin_dir / "certbot").write_text(wrapper)
        (bin_dir / "certbot").chmod(0o755)
        script = tmp_path / "certbot.sh"
        script.write_text(
            edge_nginx.certbot_sh(plan, config_dir=str(le), edge_dir=str(edge_dir), first_wait=0, interval="1")
        )
        argv = ["/usr/bin/env", f"PATH={bin_dir}:{os.environ['PATH']}", "/bin/sh", str(script)]
        with running(argv, out, tmp_path) as loop:
            # 1. placeholders: a self-signed pair per name (certbot itself waits, see the wrapper)
            wait_until(
                lambda: all((edge_dir / host / "fullchain.pem").exists() for host in hosts),
                "certbot.sh to write placeholders",
                loop,
                out,
            )
            assert (edge_dir / "serial").read_text() == "1\n"
            placeholders = {host: first_certificate(edge_dir / host / "fullchain.pem") for host in hosts}
            for certificate in placeholders.values():
                assert certificate.issuer == certificate.subject

            run_sh = {"edge_dir": str(edge_dir), "poll_seconds": 1}
            pki = LocalCA(tmp_path / "unused-ca")  # nginx_edge's own client CA: not used here
            with nginx_edge(plan, tmp_path / "run", pki, run_sh=run_sh, cert_dir=edge_dir) as edge:
                log = tmp_path / "run" / "nginx.out"
                wait_until(lambda: edge.handshake_error(hosts[0]) is None, "nginx on placeholders", edge.process, log)
                master = edge.process.pid
                (tmp_path / "pebble").mkdir()
                with pebble(programs, tmp_path / "pebble", api, mgmt, edge.http_port) as root:
                    # 2. NGINX serves the placeholders, which nothing trusts
                    for host in hosts:
                        assert edge.served_certificate(host) == placeholders[host]
                        assert not verifies(edge, host, root)
                    if os.geteuid() == 0:
                        assert set(worker_users(master)) == {nginx_worker_user()}
                    assert not (le / "live").exists()
                    ready.touch()

                    # 3. the real certbot obtains a certificate per name (HTTP-01 through NGINX's port 80
                    # stand-in), certbot.sh installs them and bumps the serial, run.sh reloads NGINX
                    def issued(host: str) -> bool:
                        return "Pebble" in first_certificate(edge_dir / host / "fullchain.pem").issuer.rfc4514_string()

                    wait_until(
                        lambda: all(issued(h) for h in hosts),
                        "certbot to obtain every certificate",
                        loop,
                        out,
                        timeout=ISSUE_SECONDS,
                    )
                    for host in hosts:
                        assert (le / "live" / host / "fullchain.pem").exists(), host
                        wait_until(
                            lambda host=host: verifies(edge, host, root),
                            f"nginx to serve {host}'s certificate",
                            edge.process,
                            log,
                        )
                        assert edge.served_certificate(host) == first_certificate(edge_dir / host / "fullchain.pem")
                    assert (edge_dir / "serial").read_text() == "2\n"
                    reloaded = "nginx: reloaded for certificate serial {}"
                    wait_until(lambda: reloaded.format(2) in log.read_text(), "run.sh's reload", edge.process, log)
                    assert edge.process.poll() is None and edge.process.pid == master  # reloaded, not restarted
                    if os.geteuid() == 0:
                        assert set(worker_users(master)) == {nginx_worker_user()}
                    assert edge.http(CLOUD, "/x").status == 301

                    # 4. a renewal: the loop's `certbot renew`, forced for one name
                    before = edge.served_certificate(CLOUD)
                    other = edge.served_certificate("git.example.com")
                    force.write_text(CLOUD)
                    wait_until(
                        lambda: edge.served_certificate(CLOUD) != before,
                        "the renewed certificate",
                        loop,
                        out,
                        timeout=ISSUE_SECONDS,
                    )
                    after = edge.served_certificate(CLOUD)
                    assert "Pebble" in after.issuer.rfc4514_string()
                    assert after.not_valid_before_utc >= before.not_valid_before_utc
                    assert after.serial_number != before.serial_number
                    assert after == first_certificate(le / "live" / CLOUD / "fullchain.pem")
                    assert (le / "archive" / CLOUD / "fullchain2.pem").exists()
                    assert verifies(edge, CLOUD, root)
                    assert edge.served_certificate("git.example.com") == other
                    assert (edge_dir / "serial").read_text() == "3\n"
                    wait_until(lambda: reloaded.format(3) in log.read_text(), "run.sh's reload", edge.process, log)
                    assert edge.process.poll() is None and edge.process.pid == master
                    if os.geteuid() == 0:
                        assert set(worker_users(master)) == {nginx_worker_user()}
    assert " failed at " not in out.read_text()
