"""ddclient.conf: a secret file (ddclient takes the password only inline)."""

from __future__ import annotations

from homelab.errors import ConfigError
from homelab.layout import DDCLIENT_CONF_SECRET
from homelab.plan_model import Plan
from homelab.render.rendering import Rendering
from homelab.render.templating import render_template


def render(plan: Plan, rendering: Rendering, secret_values: dict[str, str]) -> None:
    ddns = plan.config.ddns
    assert ddns is not None and ddns.password_file is not None
    password = secret_values[ddns.password_file]
    if any(c in password for c in "'\\\n\r"):
        raise ConfigError(
            [
                f"ddns.password_file: the secret in {ddns.password_file!r} contains a quote, backslash or "
                "line break, which ddclient.conf cannot hold"
            ]
        )
    hosts = ddns.hostnames or [r.host for r in plan.routes]
    rendering.secret_files[DDCLIENT_CONF_SECRET] = render_template(
        "ddclient.conf.j2",
        interval=ddns.interval,
        check_ip_url=ddns.check_ip_url,
        provider=ddns.provider,
        server=ddns.server,
        login=ddns.login,
        zone=ddns.zone or plan.config.domain.name,
        password=password,
        hosts=hosts,
    ).encode()
