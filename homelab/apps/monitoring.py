"""collectd: the BMC (local device, or a LAN block in a secret file), and the disks SMART watches;
Grafana: the mail server alerts go through."""

from __future__ import annotations

from homelab.layout import COLLECTD_IPMI_INCLUDE, COLLECTD_IPMI_SECRET
from homelab.monitoring.inventory import smart_disks
from homelab.monitoring.notify import SMTP_PASSWORD_SECRET, smtp_environment
from homelab.plan_model import AppContext


def customize(ctx: AppContext) -> None:
    monitoring, collectd = ctx.config.monitoring, ctx.services["collectd"]
    if monitoring.ipmi.mode == "local":
        collectd.devices.append("/dev/ipmi0:/dev/ipmi0")
    if monitoring.ipmi.mode == "lan":
        # collectd's ipmi plugin takes the BMC password only inline: the block lives in a secret file
        ctx.mount_rendered_secret(collectd, COLLECTD_IPMI_SECRET, COLLECTD_IPMI_INCLUDE)
    disks = smart_disks(monitoring.disks, ctx.plan.inventory, ctx.plan.profile.disks)  # SMART needs the device
    collectd.devices += [f"/dev/{disk}:/dev/{disk}" for disk in disks]
    smtp, grafana = monitoring.smtp, ctx.services["grafana"]
    if smtp:
        grafana.environment.update(smtp_environment(smtp))
    if smtp and smtp.password_file:
        ctx.pass_user_secret(grafana, "GF_SMTP_PASSWORD__FILE", SMTP_PASSWORD_SECRET, smtp.password_file)
