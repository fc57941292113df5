"""The rendered ddclient.conf, run by the real ddclient (Debian 3.10) against a local dyndns2 server.

Test-only change: `ssl=yes` -> `ssl=no`, since the local update server speaks plain HTTP. Everything
else (protocol, server, login, password, hosts, the web IP check) is the rendered file."""

from __future__ import annotations

import base64
import http.server
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar
from urllib.parse import parse_qs, urlparse

import pytest
import yaml

from homelab.config.loader import load
from homelab.plan import build_plan
from homelab.plan_model import Plan
from homelab.render import Rendering, ddclient
from homelab.render.compose import render_stack
from homelab.secrets import user_secret_values
from tests.conftest import write_secret

PASSWORD = "CANARY-ddns-pass-9"
PUBLIC_IP = "203.0.113.7"


class _Dyndns2(http.server.BaseHTTPRequestHandler):
    updates: ClassVar[list[dict[str, object]]] = []
    answer: ClassVar[str] = "good"  # dyndns2's reply to each host: good, or badauth (a refused update)

    def do_GET(self) -> None:
        url = urlparse(self.path)
        if url.path == "/ip":
            body = f"Current IP Address: {PUBLIC_IP}\n"
        elif url.path == "/nic/update":
            auth = base64.b64decode(self.headers.get("Authorization", "Basic ").split()[1]).decode()
            self.updates.append({"auth": auth, "query": parse_qs(url.query)})
            answer = f"good {PUBLIC_IP}" if self.answer == "good" else self.answer
            body = "\n".join(answer for _ in parse_qs(url.query)["hostname"][0].split(","))
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def dyndns2() -> Iterator[int]:
    _Dyndns2.updates, _Dyndns2.answer = [], "good"
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Dyndns2)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def _local_plan(example_config: Path, dyndns2: int) -> tuple[Plan, str]:
    """The example pointed at the local dyndns2 server: its plan and the rendered ddclient.conf."""
    write_secret(example_config.parent / "secrets" / "ddns-password", PASSWORD)
    text = example_config.read_text().replace("server: members.dyndns.org", f"server: 127.0.0.1:{dyndns2}")
    text = text.replace(
        "  password_file: secrets/ddns-password",
        f"  password_file: secrets/ddns-password\n  check_ip_url: http://127.0.0.1:{dyndns2}/ip",
    )
    example_config.write_text(text)
    loaded = load(example_config)
    plan = build_plan(loaded)
    rendering = Rendering()
    ddclient.render(plan, rendering, user_secret_values(loaded))
    return plan, rendering.secret_files["edge_ddclient_conf"].decode()


@pytest.mark.real
def test_rendered_ddclient_conf_updates_every_host(
    example_config: Path, dyndns2: int, tmp_path: Path, require_program
) -> None:
    ddclient_bin = require_program("ddclient")
    plan, conf = _local_plan(example_config, dyndns2)
    assert "ssl=yes" in conf
    conf_file = tmp_path / "ddclient.conf"
    write_secret(conf_file, conf.replace("ssl=yes", "ssl=no"))
    proc = subprocess.run(
        [
            ddclient_bin,
            "-daemon=0",
            "-foreground",
            "-noquiet",
            "-file",
            str(conf_file),
            "-cache",
            str(tmp_path / "cache"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    hosts = sorted(r.host for r in plan.routes)
    updated = sorted(h for u in _Dyndns2.updates for h in u["query"]["hostname"][0].split(","))  # type: ignore[index]
    assert updated == hosts, (proc.stdout, proc.stderr)
    for update in _Dyndns2.updates:
        assert update["auth"] == f"nas-owner:{PASSWORD}"
        assert update["query"]["myip"] == [PUBLIC_IP]  # type: ignore[index]
    assert "SUCCESS" in proc.stdout + proc.stderr


def _probe(script: str) -> int:
    return subprocess.run(["sh", "-c", script], capture_output=True, timeout=30, check=False).returncode


def _until(predicate, seconds: float) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.3)
    return False


@pytest.mark.real
@pytest.mark.parametrize("answer", ["good", "badauth"])
def test_the_healthcheck_passes_only_while_ddclient_works(  # type: ignore[no-untyped-def]
    example_config: Path, dyndns2: int, tmp_path: Path, require_program, answer: str
) -> None:
    """The rendered healthcheck against the real ddclient (Debian 3.10, which names its process as 3.11.2 does)
    run with the rendered entrypoint's arguments: failing before ddclient has finished a cycle and after it
    stopped, passing between cycles while every update was good, failing when the server refused one. The
    healthcheck it replaces passed in every one of these cases (`pgrep -f` matched the probe's own shell)."""
    ddclient_bin = require_program("ddclient")
    plan, conf = _local_plan(example_config, dyndns2)
    _Dyndns2.answer = answer
    conf_file, cache = tmp_path / "ddclient.conf", tmp_path / "ddclient.cache"
    write_secret(conf_file, conf.replace("ssl=yes", "ssl=no"))
    service = yaml.safe_load(render_stack(plan, plan.stacks["edge"]))["services"]["ddclient"]
    kind, script = service["healthcheck"]["test"]
    assert kind == "CMD-SHELL" and "/tmp/ddclient.cache" in script
    script = script.replace("/tmp/ddclient.cache", str(cache))  # the only change: where this run keeps its cache
    entrypoint = service["entrypoint"]
    args = [conf_file if a == entrypoint[entrypoint.index("-file") + 1] else a for a in entrypoint[1:]]
    args = [str(cache) if a == "/tmp/ddclient.cache" else str(a) for a in args]
    old = "pgrep -x ddclient >/dev/null || pgrep -f 'ddclient' >/dev/null"
    assert _probe(script) != 0  # not started
    assert _probe(old) == 0  # the old check, with no ddclient at all
    daemon = subprocess.Popen([ddclient_bin, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        sleeping = f"/proc/{daemon.pid}/cmdline"
        assert _until(lambda: Path(sleeping).read_bytes().startswith(b"ddclient - sleeping"), 30), "no cycle"
        assert _Dyndns2.updates, "ddclient sent no update"
        if answer == "good":
            assert _until(lambda: _probe(script) == 0, 10)
        else:
            assert "status=badauth" in cache.read_text() and _probe(script) != 0
    finally:
        daemon.kill()  # TERM waits for the end of its 10 s sleep (ddclient.in:1177-1183)
        daemon.wait(10)
    assert _probe(script) != 0  # stopped
