"""The rendered ddclient.conf, run by the real ddclient (Debian 3.10) against a local dyndns2 server.

Test-only change: `ssl=yes` -> `ssl=no`, since the local update server speaks plain HTTP. Everything
else (protocol, server, login, password, hosts, the web IP check) is the rendered file."""

from __future__ import annotations

import base64
import http.server
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar
from urllib.parse import parse_qs, urlparse

import pytest

from homelab.config.loader import load
from homelab.plan import build_plan
from homelab.render import Rendering, ddclient
from homelab.secrets import user_secret_values
from tests.conftest import write_secret

PASSWORD = "CANARY-ddns-pass-9"
PUBLIC_IP = "203.0.113.7"


class _Dyndns2(http.server.BaseHTTPRequestHandler):
    updates: ClassVar[list[dict[str, object]]] = []

    def do_GET(self) -> None:
        url = urlparse(self.path)
        if url.path == "/ip":
            body = f"Current IP Address: {PUBLIC_IP}\n"
        elif url.path == "/nic/update":
            auth = base64.b64decode(self.headers.get("Authorization", "Basic ").split()[1]).decode()
            self.updates.append({"auth": auth, "query": parse_qs(url.query)})
            body = "\n".join(f"good {PUBLIC_IP}" for _ in parse_qs(url.query)["hostname"][0].split(","))
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
    _Dyndns2.updates = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Dyndns2)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.real
def test_rendered_ddclient_conf_updates_every_host(
    example_config: Path, dyndns2: int, tmp_path: Path, require_program
) -> None:
    ddclient_bin = require_program("ddclient")
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
    conf = rendering.secret_files["edge_ddclient_conf"].decode()
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
