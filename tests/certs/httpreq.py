"""lego's httpreq API, served here on 127.0.0.1 the way lego v5.2.2 (Traefik 3.7's) calls it
(providers/dns/httpreq/httpreq.go): POST <endpoint>/present and /cleanup, Content-Type and Accept
application/json, a body of exactly {"fqdn": "_acme-challenge.<domain>.", "value": "<TXT value>"}, Basic
auth when both HTTPREQ_USERNAME and HTTPREQ_PASSWORD are set; any 2xx is success. Each call is checked
strictly (a wrong body, path, method or credential answers 4xx) and recorded; present/cleanup set and
clear the TXT record in pebble-challtestsrv through its management API (/set-txt, /clear-txt).
Also the config on dns_provider httpreq."""

from __future__ import annotations

import base64
import contextlib
import json
import threading
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import yaml

from tests.conftest import EXAMPLE, EXAMPLE_SECRETS, write_secret

USERNAME = "homelab-acme"


@dataclass
class Endpoint:
    url: str
    calls: list[tuple[str, dict[str, str]]] = field(default_factory=list)  # (path, body) of accepted calls
    refused: list[str] = field(default_factory=list)  # why calls were refused


@contextlib.contextmanager
def httpreq_endpoint(password: str, challtestsrv: str | None) -> Iterator[Endpoint]:
    """The endpoint on a free 127.0.0.1 port, taking `USERNAME`:`password`; `challtestsrv` is the
    management API's base URL (None: record only)."""
    expected = "Basic " + base64.b64encode(f"{USERNAME}:{password}".encode()).decode()
    endpoint = Endpoint("")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            status, why = self._check(raw)
            if status != 200:
                endpoint.refused.append(why)
                self.send_response(status)
                self.end_headers()
                return
            body = json.loads(raw)
            if challtestsrv is not None:
                management = {"/present": "/set-txt", "/cleanup": "/clear-txt"}[self.path]
                command = {"host": body["fqdn"], "value": body["value"]}
                if self.path == "/cleanup":
                    command.pop("value")
                url = challtestsrv + management  # the test's own challtestsrv
                request = urllib.request.Request(url, data=json.dumps(command).encode())  # noqa: S310
                with urllib.request.urlopen(request, timeout=5) as answer:  # noqa: S310
                    assert answer.status == 200
            endpoint.calls.append((self.path, body))
            self.send_response(200)
            self.end_headers()

        def _check(self, raw: bytes) -> tuple[int, str]:
            if self.path not in ("/present", "/cleanup"):
                return 404, f"path {self.path}"
            if self.headers.get("Authorization") != expected:
                return 401, f"{self.path}: wrong or no Basic auth"
            if self.headers.get("Content-Type") != "application/json":
                return 415, f"{self.path}: Content-Type {self.headers.get('Content-Type')}"
            try:
                body = json.loads(raw)
            except ValueError:
                return 400, f"{self.path}: not JSON"
            if not isinstance(body, dict) or set(body) != {"fqdn", "value"}:
                return 400, f"{self.path}: body {body!r}"
            if not (body["fqdn"].startswith("_acme-challenge.") and body["fqdn"].endswith(".") and body["value"]):
                return 400, f"{self.path}: body {body!r}"
            return 200, ""

        def log_message(self, format: str, *args: object) -> None:
            """Quiet: pytest shows the recorded calls."""

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    endpoint.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield endpoint
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def httpreq_config(
    folder: Path, endpoint: str, password: str, *, wildcard: bool = True, ca_server: str | None = None
) -> Path:
    """The bundled example (Traefik edge) on the DNS-01 challenge through lego's httpreq at `endpoint`,
    its credentials in secrets/httpreq-username and secrets/httpreq-password (0600)."""
    section = {
        "endpoint": endpoint,
        "username_file": "secrets/httpreq-username",
        "password_file": "secrets/httpreq-password",
    }
    config = provider_config(folder, "httpreq", section, wildcard=wildcard, ca_server=ca_server)
    write_secret(folder / "secrets" / "httpreq-username", USERNAME)
    write_secret(folder / "secrets" / "httpreq-password", password)
    return config


def provider_config(
    folder: Path, provider: str, section: dict[str, str], *, wildcard: bool = True, ca_server: str | None = None
) -> Path:
    """The bundled example (Traefik edge) on the DNS-01 challenge through lego's `provider`, configured by
    `section` (domain.acme.<provider>); staging first off (one CA)."""
    folder.mkdir(parents=True, exist_ok=True)
    data = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    data["edge"]["kind"] = "traefik"
    data["storage"]["mountpoint"] = str(folder / "tank")
    data["domain"]["wildcard"] = wildcard
    acme = data["domain"]["acme"]
    acme.update(challenge="dns", dns_provider=provider, staging_first=False)
    acme[provider] = section
    if ca_server:
        acme["ca_server"] = ca_server
    (folder / "homelab.yaml").write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    for name in EXAMPLE_SECRETS:
        write_secret(folder / "secrets" / name, f"example-{name}-value")
    return folder / "homelab.yaml"
