"""Where alerts go: Grafana's SMTP settings (GF_SMTP_*, the password as a secret file) and the
contact points, from `monitoring.smtp`, `monitoring.contact_email` and `monitoring.webhook`.
homelab/monitoring/delivery.py sends a test through exactly these settings."""

from __future__ import annotations

from typing import Any

from homelab.config.monitoring import Monitoring, Smtp

SMTP_PASSWORD_SECRET = "smtp_password"  # noqa: S105 - the secret's name


def smtp_environment(smtp: Smtp) -> dict[str, str]:
    """GF_SMTP_* for Grafana's [smtp] section (without the password: GF_SMTP_PASSWORD__FILE)."""
    env = {
        "GF_SMTP_ENABLED": "true",
        "GF_SMTP_HOST": f"{smtp.host}:{smtp.port}",
        "GF_SMTP_FROM_ADDRESS": smtp.from_address,
        "GF_SMTP_FROM_NAME": "homelab",
        "GF_SMTP_SKIP_VERIFY": "true" if smtp.skip_verify else "false",
    }
    if smtp.user:
        env["GF_SMTP_USER"] = smtp.user
    return env


def contact_points(monitoring: Monitoring) -> dict[str, Any] | None:
    """Grafana contact-point provisioning: email (when an address is set) and a webhook."""
    receivers: list[dict[str, Any]] = []
    if monitoring.contact_email:
        receivers.append({"uid": "homelab-email", "type": "email", "settings": {"addresses": monitoring.contact_email}})
    if monitoring.webhook:
        receivers.append(
            {
                "uid": "homelab-webhook",
                "type": "webhook",
                "settings": {"url": monitoring.webhook.url, "httpMethod": "POST"},
            }
        )
    if not receivers:
        return None
    return {
        "apiVersion": 1,
        "contactPoints": [{"orgId": 1, "name": "homelab", "receivers": receivers}],
        "policies": [{"orgId": 1, "receiver": "homelab", "group_by": ["alertname"]}],
    }
