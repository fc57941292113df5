"""Alert delivery: Grafana's SMTP environment, the contact points, and `homelab monitor test-alert`
against a small SMTP sink and a webhook, both on loopback (servers written here: they check what a
real server checks: the login and the envelope)."""

from __future__ import annotations

import base64
import json
import socketserver
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from homelab.cli.monitor import monitor_app
from homelab.config.loader import load
from homelab.plan import build_plan
from homelab.render import render_all
from tests.conftest import write_secret

USER, PASSWORD = "alerts@example.com", "mail-s3cret"


class SmtpSink(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), SmtpHandler)
        self.mails: list[dict[str, Any]] = []
        self.logins: list[tuple[str, str]] = []


class SmtpHandler(socketserver.StreamRequestHandler):
    """Just enough SMTP: EHLO (offers AUTH PLAIN/LOGIN, no STARTTLS), AUTH, MAIL, RCPT, DATA, QUIT."""

    def reply(self, text: str) -> None:
        self.wfile.write(f"{text}\r\n".encode())

    def handle(self) -> None:
        server: SmtpSink = self.server  # type: ignore[assignment]
        self.reply("220 sink ESMTP")
        mail: dict[str, Any] = {"to": []}
        while line := self.rfile.readline().decode().rstrip("\r\n"):
            verb = line.split(" ", 1)[0].upper()
            if verb == "EHLO":
                self.reply("250-sink\r\n250 AUTH PLAIN LOGIN")
            elif verb == "AUTH":
                user, password = self.auth(line)
                server.logins.append((user, password))
                self.reply("235 ok" if (user, password) == (USER, PASSWORD) else "535 authentication failed")
            elif verb == "MAIL":
                mail["from"] = line.split(":", 1)[1].strip("<> ")
                self.reply("250 ok")
            elif verb == "RCPT":
                mail["to"].append(line.split(":", 1)[1].strip("<> "))
                self.reply("250 ok")
            elif verb == "DATA":
                self.reply("354 go")
                body = []
                while (data := self.rfile.readline().decode()) not in (".\r\n", ""):
                    body.append(data)
                mail["body"] = "".join(body)
                server.mails.append(mail)
                mail = {"to": []}
                self.reply("250 queued")
            elif verb == "QUIT":
                self.reply("221 bye")
                return
            else:
                self.reply("250 ok")

    def auth(self, line: str) -> tuple[str, str]:
        parts = line.split()
        if parts[1].upper() == "PLAIN":
            _, user, password = base64.b64decode(parts[2]).decode().split("\0")
            return user, password
        self.reply("334 VXNlcm5hbWU6")
        user = base64.b64decode(self.rfile.readline().strip()).decode()
        self.reply("334 UGFzc3dvcmQ6")
        return user, base64.b64decode(self.rfile.readline().strip()).decode()


class Hook(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.posts.append(json.loads(body))  # type: ignore[attr-defined]
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def servers() -> Iterator[tuple[SmtpSink, HTTPServer]]:
    sink = SmtpSink()
    hook = HTTPServer(("127.0.0.1", 0), Hook)
    hook.posts = []  # type: ignore[attr-defined]
    threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in (sink, hook)]
    for thread in threads:
        thread.start()
    yield sink, hook
    for server in (sink, hook):
        server.shutdown()
        server.server_close()


def configure(example_config: Path, smtp: dict[str, Any] | None, webhook: str | None, password: str = PASSWORD) -> Path:
    raw = yaml.safe_load(example_config.read_text())
    if smtp is not None:
        raw["monitoring"]["smtp"] = smtp
        write_secret(example_config.parent / "secrets" / "smtp", password)
    if webhook:
        raw["monitoring"]["webhook"] = {"url": webhook}
    example_config.write_text(yaml.safe_dump(raw, sort_keys=False))
    return example_config


def smtp_settings(port: int) -> dict[str, Any]:
    return {
        "host": "127.0.0.1",
        "port": port,
        "from_address": "nas@example.com",
        "user": USER,
        "password_file": "secrets/smtp",
    }


def test_test_alert_sends_a_mail_and_a_webhook(example_config: Path, servers) -> None:  # type: ignore[no-untyped-def]
    sink, hook = servers
    config = configure(
        example_config, smtp_settings(sink.server_address[1]), f"http://127.0.0.1:{hook.server_address[1]}/homelab"
    )
    done = CliRunner().invoke(monitor_app, ["test-alert", "--config", str(config)])
    assert done.exit_code == 0, done.output
    assert sink.logins == [(USER, PASSWORD)]
    assert [(m["from"], m["to"]) for m in sink.mails] == [("nas@example.com", ["admin@example.com"])]
    assert "Subject: homelab test alert" in sink.mails[0]["body"]
    assert hook.posts[0]["status"] == "firing" and hook.posts[0]["alerts"][0]["labels"]["alertname"] == "TestAlert"
    assert PASSWORD not in done.output


def test_a_wrong_password_fails_before_a_fan_does(example_config: Path, servers) -> None:  # type: ignore[no-untyped-def]
    sink, _hook = servers
    config = configure(example_config, smtp_settings(sink.server_address[1]), None, password="wrong")
    done = CliRunner().invoke(monitor_app, ["test-alert", "--config", str(config)])
    assert done.exit_code == 4  # an environment problem (docs/cli.md)
    assert "error: SMTP 127.0.0.1:" in done.output and "535" in done.output and "wrong" not in done.output
    assert sink.mails == []


def test_a_closed_port_and_a_dead_webhook_are_reported(example_config: Path, servers) -> None:  # type: ignore[no-untyped-def]
    sink, _hook = servers
    port = sink.server_address[1]
    sink.shutdown()
    sink.server_close()
    config = configure(example_config, None, f"http://127.0.0.1:{port}/nothing-here")
    raw = yaml.safe_load(config.read_text())
    del raw["monitoring"]["contact_email"]
    config.write_text(yaml.safe_dump(raw))
    done = CliRunner().invoke(monitor_app, ["test-alert", "--config", str(config)])
    assert done.exit_code == 4 and f"webhook http://127.0.0.1:{port}/nothing-here" in done.output


def test_mail_without_smtp_is_a_config_error(example_config: Path) -> None:
    done = CliRunner().invoke(monitor_app, ["test-alert", "--config", str(example_config)])
    assert done.exit_code == 2 and "monitoring.smtp: needed to send mail to admin@example.com" in done.output


def test_grafana_gets_the_smtp_settings_and_the_password_as_a_file(example_config: Path) -> None:
    config = configure(example_config, smtp_settings(2525), "https://ntfy.example.com/nas")
    plan = build_plan(load(config))
    grafana = plan.stacks["monitoring"].services["grafana"]
    assert grafana.environment["GF_SMTP_ENABLED"] == "true"
    assert grafana.environment["GF_SMTP_HOST"] == "127.0.0.1:2525"
    assert grafana.environment["GF_SMTP_FROM_ADDRESS"] == "nas@example.com"
    assert grafana.environment["GF_SMTP_USER"] == USER
    assert grafana.environment["GF_SMTP_PASSWORD__FILE"] == "/run/secrets/monitoring_smtp_password"
    assert ("monitoring_smtp_password", None) in grafana.secrets
    secrets = {"secrets/ddns-password": "x", "secrets/b2-account": "x", "secrets/b2-key": "x", "secrets/smtp": PASSWORD}
    rendering = render_all(plan, secrets)
    assert all(PASSWORD.encode() not in content for content in rendering.files.values())
    contact = yaml.safe_load(rendering.files["monitoring/grafana/provisioning/alerting/contact-points.yaml"])
    receivers = {r["type"]: r["settings"] for r in contact["contactPoints"][0]["receivers"]}
    assert receivers == {
        "email": {"addresses": "admin@example.com"},
        "webhook": {"url": "https://ntfy.example.com/nas", "httpMethod": "POST"},
    }
