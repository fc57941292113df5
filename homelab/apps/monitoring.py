"""collectd: the BMC (local device, or a LAN block in a secret file), and the disks SMART watches;
Grafana: the mail server alerts go through, and its sign-in through the SSO portal (sso.apps.grafana: oidc)."""

from __future__ import annotations

from homelab.layout import COLLECTD_IPMI_INCLUDE, COLLECTD_IPMI_SECRET
from homelab.monitoring.inventory import smart_disks
from homelab.monitoring.notify import SMTP_PASSWORD_SECRET, smtp_environment
from homelab.plan_model import SECRETS_MOUNT, AppContext, Secret
from homelab.sso_routes import SCOPES, Client, clients


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
    client = clients(ctx.plan).get("grafana")
    if client:
        grafana.environment.update(generic_oauth(client))
        ctx.plan.secrets.setdefault(client.secret_name, Secret(client.secret_name, None))
        grafana.secrets.append((client.secret_name, None))


def generic_oauth(client: Client) -> dict[str, str]:
    """Grafana's generic_oauth settings ([auth.generic_oauth], as GF_AUTH_GENERIC_OAUTH_* variables) for the
    portal's client: authorization code with PKCE, the user from the UserInfo claims (the login, name, mail
    and groups the portal releases), the client secret read from its file (run.sh's GF_*__FILE)."""
    prefix = "GF_AUTH_GENERIC_OAUTH_"
    settings = {
        "ENABLED": "true",
        "NAME": "Single sign-on",
        "ALLOW_SIGN_UP": "true",  # the portal decides who gets in (the app's groups); Grafana makes the account
        "CLIENT_ID": client.client_id,
        "CLIENT_SECRET__FILE": f"{SECRETS_MOUNT}/{client.secret_name}",
        "SCOPES": " ".join(SCOPES),
        "AUTH_URL": client.endpoint("authorize"),
        "TOKEN_URL": client.endpoint("token"),
        "API_URL": client.endpoint("userinfo"),
        "USE_PKCE": "true",
        "LOGIN_ATTRIBUTE_PATH": "preferred_username",
        "NAME_ATTRIBUTE_PATH": "name",
        "EMAIL_ATTRIBUTE_PATH": "email",
        "GROUPS_ATTRIBUTE_PATH": "groups",
    }
    return {prefix + key: value for key, value in settings.items()}
