"""`monitoring:` in homelab.yaml: the BMC, thresholds, where alerts go, per-sensor overrides."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from homelab.config.base import Model
from homelab.config.types import (
    Address,
    DiskName,
    Email,
    Login,
    Port,
    SecretFile,
    Subdomain,
)


class Ipmi(Model):
    mode: Literal["off", "local", "lan"] = Field(
        "local", description="off, local (/dev/ipmi0 in the collectd container) or lan (BMC over RMCP+)."
    )
    address: Address | None = Field(None, description="BMC address (lan): host name or IP address.")
    username: Login | None = Field(None, description="BMC user (lan).")
    password_file: SecretFile | None = Field(None, description="Secret file with the BMC password (lan).")
    cipher_suite: int | None = Field(
        None,
        ge=0,
        le=17,
        description="RMCP+ cipher suite for `homelab monitor discover` (ipmitool -C); unset: ipmitool asks the "
        "BMC, which costs a 10 s timeout on BMCs that do not answer that (3 works on nearly all).",
    )

    @model_validator(mode="after")
    def _lan_needs_credentials(self) -> Ipmi:
        if self.mode == "lan" and not (self.address and self.username and self.password_file):
            raise ValueError("mode 'lan' needs address, username and password_file")
        return self


class Thresholds(Model):
    cpu_temp_c: float | None = Field(None, description="CPU temperature alert; default from the profile.")
    disk_temp_c: float | None = Field(None, description="Disk temperature alert; default from the profile.")
    pool_used_percent: float = Field(80, gt=0, le=100, description="Alert when a dataset's pool is this full.")
    fan_min_rpm: float = Field(
        100, ge=0, description="Fan alert floor (RPM) for fans whose BMC sets no lower critical threshold."
    )


class Smtp(Model):
    """Grafana's mail server (rendered as GF_SMTP_*; the password reaches Grafana as a secret file)."""

    host: Address = Field(description="SMTP server host name or IP address.")
    port: Port = Field(587, description="SMTP port (587 STARTTLS, 465 TLS, 25 plain).")
    from_address: Email = Field(description="Sender address of alert mails.")
    user: str | None = Field(None, description="SMTP login, if the server wants one.")
    password_file: SecretFile | None = Field(None, description="Secret file with the SMTP password.")
    skip_verify: bool = Field(False, description="Accept a self-signed server certificate.")


class Webhook(Model):
    """A JSON webhook contact point (ntfy, Gotify or anything that takes a POST)."""

    url: str = Field(pattern=r"^https?://\S+$", description="Where Grafana POSTs alerts, e.g. https://ntfy.sh/topic.")


class SensorLimits(Model):
    """A sensor's alert limits; each one set here replaces the BMC's (the inventory's)."""

    lower_critical: float | None = Field(None, description="Fans and voltages alert below this.")
    lower_non_critical: float | None = Field(None, description="Drawn on dashboards only.")
    upper_non_critical: float | None = Field(None, description="Drawn on dashboards only.")
    upper_critical: float | None = Field(
        None, description="Temperatures, voltages, power and current alert above this."
    )


class SensorOverride(Model):
    """Changes to one discovered sensor, kept in homelab.yaml (the inventory file can be rewritten)."""

    label: str | None = Field(None, min_length=1, description="Its name on dashboards and in alerts.")
    hide: bool | None = Field(None, description="true: not collected, no panel, no alert.")
    thresholds: SensorLimits = Field(default_factory=SensorLimits, description="Alert limits that replace the BMC's.")
    defaults: bool | None = Field(None, description="false: no homelab default limit or baseline rule.")
    rise: float | None = Field(
        None, ge=0, description="Alert this far above (voltages: off) its median of the last day; 0: never."
    )
    silent: bool | None = Field(None, description="false: no alert when it sends nothing.")


class Monitoring(Model):
    enabled: bool = Field(True, description="Deploy collectd, Graphite and Grafana.")
    interval: int = Field(10, ge=1, le=300, description="Collection interval in seconds (= finest retention).")
    subdomain: Subdomain = Field("grafana", description="Grafana's host label (always LAN-only).")
    ipmi: Ipmi = Field(default_factory=Ipmi, description="Where collectd reads BMC sensors.")
    disks: list[DiskName] | None = Field(None, description="Disks to watch (sda...); default: the profile's disks.")
    thresholds: Thresholds = Field(default_factory=Thresholds, description="Alert thresholds.")
    contact_email: Email | None = Field(None, description="Where Grafana sends alerts.")
    smtp: Smtp | None = Field(None, description="The mail server Grafana sends alert mails through.")
    webhook: Webhook | None = Field(None, description="A webhook contact point (ntfy, Gotify...).")
    inventory: str | None = Field(
        None,
        description="The sensor inventory `homelab monitor discover` writes (relative to homelab.yaml); "
        "without one the hardware profile's sensors are used.",
    )
    sensors: dict[str, SensorOverride] = Field(
        default_factory=dict,
        description="Per-sensor changes over the inventory, by the sensor's name (as the BMC prints it) or its "
        "inventory `key`.",
    )
