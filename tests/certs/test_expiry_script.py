"""The expiry exec program against a real TLS server (SNI picks the certificate), with real openssl."""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

from homelab.certs import expiry
from tests.certs import conftest as certs

pytestmark = pytest.mark.real


def _context(tmp_path: Path, name: str, days_left: float) -> ssl.SSLContext:
    issued = datetime.now(UTC) - timedelta(days=90 - days_left)
    cert = tmp_path / f"{name}.pem"
    key = tmp_path / f"{name}.key"
    cert.write_bytes(certs.make_cert([name], issued=issued, days=90))
    key.write_bytes(
        certs._KEY.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    return context


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[int]:
    contexts = {
        "plex.example.com": _context(tmp_path, "plex.example.com", 40),
        "cloud.example.com": _context(tmp_path, "cloud.example.com", 10),
    }
    default = contexts["plex.example.com"]

    def pick(sock: ssl.SSLObject, server_name: str | None, _context: ssl.SSLContext) -> int | None:
        if server_name not in contexts:
            return ssl.ALERT_DESCRIPTION_UNRECOGNIZED_NAME  # sniStrict: no certificate for that name
        sock.context = contexts[server_name]
        return None

    default.sni_callback = pick
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            try:
                conn.settimeout(10)
                with default.wrap_socket(conn, server_side=True):
                    pass  # the handshake sent the certificate: that is all the client reads
            except (OSError, ssl.SSLError):
                pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        thread.join(timeout=10)
        listener.close()


def test_days_left_per_name(tls_server: int, require_program) -> None:
    require_program("openssl")
    # the name without a certificate first: had it sent a value, it would be the first line
    names = ["ghost.example.com", "plex.example.com", "cloud.example.com"]
    env = {**os.environ, "COLLECTD_HOSTNAME": "nas", "COLLECTD_INTERVAL": "3600"}
    proc = subprocess.Popen(
        ["sh", str(expiry.SCRIPT), "127.0.0.1", str(tls_server), *names], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        lines = []
        deadline = time.monotonic() + 120
        while len(lines) < 2 and time.monotonic() < deadline:
            line = proc.stdout.readline()  # type: ignore[union-attr]
            if not line:
                break
            lines.append(line.strip())
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    parsed = [line.split(" ") for line in lines]
    assert [(p[0], p[1], p[2]) for p in parsed] == [
        ("PUTVAL", '"nas/certs-plex.example.com/gauge-days_left"', "interval=3600"),
        ("PUTVAL", '"nas/certs-cloud.example.com/gauge-days_left"', "interval=3600"),
    ]
    plex, cloud = (float(p[3].removeprefix("N:")) for p in parsed)
    assert 39.9 < plex < 40.1
    assert 9.9 < cloud < 10.1
