"""`homelab monitor test-alert`: a test notification with exactly the settings Grafana gets
(homelab/monitoring/notify.py), so a wrong host, port or password shows before a fan fails."""

from __future__ import annotations

import json
import smtplib
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass
from email.message import EmailMessage

from homelab.config.loaded import LoadedConfig
from homelab.config.monitoring import Smtp
from homelab.errors import ConfigError, EnvironmentProblem

TEST_SUBJECT = "homelab test alert"


@dataclass(frozen=True)
class Delivery:
    channel: str
    detail: str


def send_mail(smtp: Smtp, password: str | None, to: str, timeout: float = 30) -> Delivery:
    """One test mail through the configured server: STARTTLS on 587 (or when the server offers it),
    TLS on 465, login when a user is set, as Grafana does."""
    message = EmailMessage()
    message["Subject"], message["From"], message["To"] = TEST_SUBJECT, smtp.from_address, to
    message.set_content("homelab test alert: Grafana's alert mails go through this server.\n")
    context = ssl.create_default_context()
    if smtp.skip_verify:
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    try:
        if smtp.port == 465:
            client: smtplib.SMTP = smtplib.SMTP_SSL(smtp.host, smtp.port, timeout=timeout, context=context)
        else:
            client = smtplib.SMTP(smtp.host, smtp.port, timeout=timeout)
        with client:
            client.ehlo()
            if smtp.port != 465 and client.has_extn("starttls"):
                client.starttls(context=context)
                client.ehlo()
            if smtp.user:
                client.login(smtp.user, password or "")
            client.send_message(message)
    except (OSError, smtplib.SMTPException) as exc:
        raise EnvironmentProblem(f"SMTP {smtp.host}:{smtp.port}: {exc}") from exc
    return Delivery("email", f"sent to {to} through {smtp.host}:{smtp.port}")


def send_webhook(url: str, timeout: float = 30) -> Delivery:
    """A POST shaped like Grafana's webhook payload (status, alerts, title, message)."""
    body = json.dumps(
        {"receiver": "homelab", "status": "firing", "title": TEST_SUBJECT, "message": "homelab test alert",
         "alerts": [{"status": "firing", "labels": {"alertname": "TestAlert", "homelab": "test"}}]}
    ).encode()  # fmt: skip
    headers = {"Content-Type": "application/json"}
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")  # noqa: S310 - the user's webhook
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - the user's webhook
            status = response.status
    except (urllib.error.URLError, OSError) as exc:
        raise EnvironmentProblem(f"webhook {url}: {exc}") from exc
    return Delivery("webhook", f"POST {url}: HTTP {status}")


def test_alert(loaded: LoadedConfig) -> list[Delivery]:
    """A test notification through every channel Grafana is given: a mail to `contact_email` through
    `smtp`, and a POST to `webhook`."""
    from homelab.secrets import user_secret_values

    monitoring = loaded.config.monitoring
    deliveries = []
    if monitoring.contact_email and not monitoring.smtp:
        raise ConfigError([f"{loaded.path}: monitoring.smtp: needed to send mail to {monitoring.contact_email}"])
    if monitoring.smtp and monitoring.contact_email:
        smtp = monitoring.smtp
        password = user_secret_values(loaded).get(smtp.password_file) if smtp.password_file else None
        deliveries.append(send_mail(smtp, password, monitoring.contact_email))
    if monitoring.webhook:
        deliveries.append(send_webhook(monitoring.webhook.url))
    if not deliveries:
        raise ConfigError([f"{loaded.path}: monitoring: no contact_email + smtp and no webhook to test"])
    return deliveries
