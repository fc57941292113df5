"""The one config model. Every key a user can write in homelab.yaml is declared here, with its doc.

The config reference (docs/config-reference.md) is generated from these models, so a field's
description is user documentation.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

_LABEL = r"(?!-)[a-z0-9-]{1,63}(?<!-)"
_HOSTNAME_RE = re.compile(rf"^{_LABEL}(\.{_LABEL})*$")
_DOMAIN_RE = re.compile(rf"^{_LABEL}(\.{_LABEL})+$")
_DATASET_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]*(/[A-Za-z0-9][A-Za-z0-9_.:-]*)*$")
_EMAIL_RE = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
_IMAGE_RE = re.compile(
    r"^([a-z0-9.-]+(:[0-9]+)?/)?[a-z0-9]+([._/-][a-z0-9]+)*(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@sha256:[a-f0-9]{64})?$"
)
_ONCALENDAR_RE = re.compile(r"^[A-Za-z0-9*,:./ ~-]+$")


def _hostname(value: str) -> str:
    if len(value) > 253 or not _HOSTNAME_RE.match(value):
        raise ValueError(f"{value!r} is not a valid hostname (lowercase letters, digits, '-', dots)")
    return value


def _host_port(value: str) -> str:
    host, _, port = value.partition(":")
    _hostname(host)
    if port and not (port.isdigit() and 0 < int(port) < 65536):
        raise ValueError(f"{value!r}: the port after ':' must be a number from 1 to 65535")
    return value


def _domain(value: str) -> str:
    if len(value) > 253 or not _DOMAIN_RE.match(value):
        raise ValueError(f"{value!r} is not a valid domain name (e.g. example.com)")
    return value


def _subdomain(value: str) -> str:
    if not re.fullmatch(_LABEL, value):
        raise ValueError(f"{value!r} is not a valid subdomain label (lowercase letters, digits, '-')")
    return value


def _dataset(value: str) -> str:
    if not _DATASET_RE.match(value):
        raise ValueError(f"{value!r} is not a valid ZFS dataset name (e.g. tank/apps)")
    return value


def _email(value: str) -> str:
    if not _EMAIL_RE.match(value):
        raise ValueError(f"{value!r} is not an email address")
    return value


def _cidr(value: str) -> str:
    try:
        return str(ipaddress.ip_network(value, strict=False))
    except ValueError:
        raise ValueError(f"{value!r} is not an IP network in CIDR form (e.g. 192.168.1.0/24)") from None


def _image(value: str) -> str:
    if not _IMAGE_RE.match(value):
        raise ValueError(f"{value!r} is not an image reference (e.g. traefik:v3.7.15)")
    return value


def _timezone(value: str) -> str:
    if not re.fullmatch(r"[A-Za-z_]+(/[A-Za-z0-9_+-]+)*|UTC", value):
        raise ValueError(f"{value!r} is not a tz database name (e.g. Europe/Berlin)")
    return value


def _absolute(value: str) -> str:
    if not value.startswith("/"):
        raise ValueError(f"{value!r} must be an absolute path")
    return value


def _oncalendar(value: str) -> str:
    if not _ONCALENDAR_RE.match(value):
        raise ValueError(f"{value!r} is not a systemd OnCalendar expression (e.g. '*-*-* 03:00:00')")
    return value


Hostname = Annotated[str, AfterValidator(_hostname)]
HostPort = Annotated[str, AfterValidator(_host_port)]
DomainName = Annotated[str, AfterValidator(_domain)]
Subdomain = Annotated[str, AfterValidator(_subdomain)]
DatasetName = Annotated[str, AfterValidator(_dataset)]
Email = Annotated[str, AfterValidator(_email)]
Cidr = Annotated[str, AfterValidator(_cidr)]
Image = Annotated[str, AfterValidator(_image)]
Timezone = Annotated[str, AfterValidator(_timezone)]
OnCalendar = Annotated[str, AfterValidator(_oncalendar)]
AbsolutePath = Annotated[str, AfterValidator(_absolute)]
Port = Annotated[int, Field(ge=1, le=65535)]
Id = Annotated[int, Field(ge=0, le=2**31 - 1)]
# A path to a file holding one secret, relative to homelab.yaml. Checked at load: exists, not world-readable.
SecretFile = Annotated[str, Field(min_length=1, json_schema_extra={"secret_file": True})]


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Server(Model):
    hostname: Hostname = Field(description="Short host name of the server; also the collectd host name.")
    timezone: Timezone = Field("UTC", description="tz database name passed to every container as TZ.")
    uid: Id = Field(1000, description="Default user id the apps run as and own their datasets with.")
    gid: Id = Field(1000, description="Default group id the apps run as.")
    profile: str = Field(
        "ecc-mini-itx", description="Hardware profile: BMC sensors, disks, pool layout (see homelab/profiles)."
    )


class Acme(Model):
    email: Email = Field(description="Account email for Let's Encrypt (expiry notices).")
    challenge: Literal["http", "tls", "dns"] = Field(
        "tls", description="ACME challenge: http (port 80), tls (TLS-ALPN on 443) or dns (needs dns_provider)."
    )
    dns_provider: str | None = Field(
        None, description="lego DNS provider code for the dns challenge, e.g. cloudflare, duckdns, namecheap."
    )
    dns_credentials: dict[str, SecretFile] = Field(
        default_factory=dict,
        description="Provider variables -> secret files, e.g. {CF_DNS_API_TOKEN: secrets/cf-token}. "
        "Passed to the edge as VAR_FILE, never as values.",
    )
    staging: bool = Field(False, description="Use Let's Encrypt staging (untrusted certificates, high limits).")
    ca_server: str | None = Field(
        None, description="ACME directory URL overriding production/staging (e.g. a Pebble test CA)."
    )

    @model_validator(mode="after")
    def _dns_needs_provider(self) -> Acme:
        if self.challenge == "dns" and not self.dns_provider:
            raise ValueError("challenge 'dns' needs dns_provider")
        if self.challenge != "dns" and (self.dns_provider or self.dns_credentials):
            raise ValueError(f"dns_provider/dns_credentials only apply to challenge 'dns', not {self.challenge!r}")
        return self


class Domain(Model):
    name: DomainName = Field(description="The domain the apps live under, e.g. example.com.")
    acme: Acme = Field(description="Let's Encrypt settings.")


class Edge(Model):
    kind: Literal["traefik", "nginx"] = Field("traefik", description="The TLS reverse proxy: traefik or nginx.")
    http_port: Port = Field(80, description="Host port for HTTP (redirects to HTTPS; ACME http challenge).")
    https_port: Port = Field(443, description="Host port for HTTPS.")
    lan_cidrs: list[Cidr] = Field(
        default_factory=lambda: ["192.168.0.0/16", "10.0.0.0/8", "172.16.0.0/12"],
        description="Networks allowed to reach admin-only routes (e.g. Grafana).",
    )
    proxy_subnet: Cidr = Field(
        "172.30.250.0/24", description="Subnet of the shared proxy network (apps trust proxies from it)."
    )
    hsts_seconds: int = Field(63072000, ge=0, description="Strict-Transport-Security max-age.")


DdnsProvider = Literal["dyndns2", "cloudflare", "namecheap", "duckdns"]


class Ddns(Model):
    enabled: bool = Field(True, description="Run ddclient to keep DNS pointed at the home IP.")
    provider: DdnsProvider = Field("dyndns2", description="dyndns2, cloudflare, namecheap or duckdns.")
    server: HostPort | None = Field(None, description="Update server, host[:port] (dyndns2; defaults per provider).")
    login: str | None = Field(None, description="Account login (dyndns2), zone owner (namecheap: the domain).")
    password_file: SecretFile | None = Field(None, description="Secret file with the password or API token.")
    hostnames: list[Hostname] = Field(
        default_factory=list, description="Names to update; default: every enabled app's hostname."
    )
    zone: DomainName | None = Field(None, description="Cloudflare zone; default: domain.name.")
    interval: int = Field(300, ge=60, description="Seconds between IP checks.")
    check_ip_url: str = Field("https://api.ipify.org", description="Web page that echoes the public IP.")

    @model_validator(mode="after")
    def _credentials(self) -> Ddns:
        if self.enabled and self.password_file is None:
            raise ValueError(f"provider {self.provider!r} needs password_file")
        if self.enabled and self.provider == "dyndns2" and not (self.login and self.server):
            raise ValueError("provider 'dyndns2' needs login and server")
        return self


class DatasetOverride(Model):
    name: DatasetName | None = Field(None, description="Full dataset name instead of <root>/<app>/<role>.")
    properties: dict[str, str] = Field(default_factory=dict, description="ZFS properties, e.g. recordsize: 1M.")


class Storage(Model):
    pool: DatasetName = Field("tank", description="ZFS pool name.")
    root: DatasetName = Field("tank/homelab", description="Parent dataset of every app dataset.")
    mountpoint: str = Field("/tank/homelab", description="Where the root dataset is mounted on the host.")
    datasets: dict[str, DatasetOverride] = Field(
        default_factory=dict, description="Overrides per dataset role, keyed '<app>/<role>' (e.g. plex/media)."
    )

    @model_validator(mode="after")
    def _root_in_pool(self) -> Storage:
        if self.root != self.pool and not self.root.startswith(self.pool + "/"):
            raise ValueError(f"root {self.root!r} is not inside pool {self.pool!r}")
        if not self.mountpoint.startswith("/"):
            raise ValueError(f"mountpoint {self.mountpoint!r} must be an absolute path")
        return self


class App(Model):
    enabled: bool = Field(True, description="Deploy this app.")
    subdomain: Subdomain | None = Field(None, description="Host label under domain.name; default: the app name.")
    lan_only: bool = Field(False, description="Only the edge.lan_cidrs may reach this app.")


class Plex(App):
    claim_token_file: SecretFile | None = Field(
        None, description="Secret file with a claim token from plex.tv/claim (first start only)."
    )
    transcode_device: str | None = Field(
        "/dev/dri", description="Device for hardware transcoding (Quick Sync); null to disable."
    )
    media_paths: dict[str, str] = Field(
        default_factory=dict, description="Extra read-only host folders: name -> host path, mounted at /data/<name>."
    )


class Nextcloud(App):
    admin_user: str = Field("admin", pattern=r"^[A-Za-z0-9_.@-]+$", description="First admin account name.")
    upload_limit: str = Field("16G", pattern=r"^\d+[KMG]$", description="Largest upload (PHP and the edge).")
    cron: bool = Field(True, description="Run background jobs in a cron container (recommended).")


class Gitea(App):
    ssh_port: Port = Field(2222, description="Host port the edge forwards to Gitea's SSH server.")


class Jenkins(App):
    agent_port: Port | None = Field(None, description="Expose the inbound agent port (50000) on this host port.")


class RStudio(App):
    pass


class Apps(Model):
    plex: Plex = Field(default_factory=Plex, description="Plex Media Server.")
    nextcloud: Nextcloud = Field(default_factory=Nextcloud, description="Nextcloud with Postgres, Redis, cron.")
    gitea: Gitea = Field(default_factory=Gitea, description="Gitea git hosting.")
    jenkins: Jenkins = Field(default_factory=Jenkins, description="Jenkins CI.")
    rstudio: RStudio = Field(default_factory=RStudio, description="RStudio Server (rocker).")


class Ipmi(Model):
    mode: Literal["off", "local", "lan"] = Field(
        "local", description="off, local (/dev/ipmi0 in the collectd container) or lan (BMC over RMCP+)."
    )
    address: str | None = Field(None, description="BMC address (lan).")
    username: str | None = Field(None, description="BMC user (lan).")
    password_file: SecretFile | None = Field(None, description="Secret file with the BMC password (lan).")

    @model_validator(mode="after")
    def _lan_needs_credentials(self) -> Ipmi:
        if self.mode == "lan" and not (self.address and self.username and self.password_file):
            raise ValueError("mode 'lan' needs address, username and password_file")
        return self


class Thresholds(Model):
    cpu_temp_c: float | None = Field(None, description="CPU temperature alert; default from the profile.")
    disk_temp_c: float | None = Field(None, description="Disk temperature alert; default from the profile.")
    pool_used_percent: float = Field(80, gt=0, le=100, description="Alert when a dataset's pool is this full.")


class Monitoring(Model):
    enabled: bool = Field(True, description="Deploy collectd, Graphite and Grafana.")
    interval: int = Field(10, ge=1, le=300, description="Collection interval in seconds (= finest retention).")
    subdomain: Subdomain = Field("grafana", description="Grafana's host label (always LAN-only).")
    ipmi: Ipmi = Field(default_factory=Ipmi, description="Where collectd reads BMC sensors.")
    disks: list[str] | None = Field(None, description="Disks to watch (sda...); default: the profile's disks.")
    thresholds: Thresholds = Field(default_factory=Thresholds, description="Alert thresholds.")
    contact_email: Email | None = Field(None, description="Where Grafana sends alerts.")


class BackupRemote(Model):
    type: str = Field(description="rclone backend type, e.g. b2, s3, sftp, webdav, local.")
    path: str = Field(description="Bucket/folder on the remote, e.g. my-bucket/nas.")
    options: dict[str, str] = Field(default_factory=dict, description="Non-secret rclone backend options.")
    secret_options: dict[str, SecretFile] = Field(
        default_factory=dict, description="rclone backend options read from secret files (e.g. key: secrets/b2-key)."
    )


class Retention(Model):
    hourly: int = Field(24, ge=0, description="Hourly snapshots kept.")
    daily: int = Field(30, ge=0, description="Daily snapshots kept.")
    monthly: int = Field(12, ge=0, description="Monthly snapshots kept.")


class Backup(Model):
    enabled: bool = Field(True, description="Back up the app datasets with rclone crypt.")
    remotes: dict[Subdomain, BackupRemote] = Field(default_factory=dict, description="Named rclone remotes.")
    schedule: OnCalendar = Field("*-*-* 03:00:00", description="systemd OnCalendar for the backup timer.")
    retention: Retention = Field(default_factory=Retention, description="Snapshots kept per period.")
    datasets: list[str] | None = Field(
        None, description="Dataset roles ('<app>/<role>') to back up; default: every role marked for backup."
    )
    crypt_password_file: SecretFile | None = Field(
        None, description="Secret file with the crypt password; generated (back it up!) when absent."
    )
    crypt_salt_file: SecretFile | None = Field(None, description="Secret file with the crypt salt; generated too.")
    state_dir: AbsolutePath | None = Field(
        None,
        description="Run records, file listings and the rclone config (0600); collectd reads "
        "<remote>.last_success here. Default: <storage.mountpoint>/.homelab/backup.",
    )

    @model_validator(mode="after")
    def _remote_present(self) -> Backup:
        if self.enabled and not self.remotes:
            raise ValueError("backup is enabled but no remotes are configured")
        return self


class Config(Model):
    version: Literal[1] = Field(description="Config format version; 1.")
    server: Server = Field(description="The box itself.")
    domain: Domain = Field(description="Public names and certificates.")
    edge: Edge = Field(default_factory=Edge, description="The TLS reverse proxy.")
    ddns: Ddns | None = Field(None, description="Dynamic DNS (ddclient); omit to manage DNS yourself.")
    storage: Storage = Field(default_factory=Storage, description="ZFS datasets for app data.")
    apps: Apps = Field(default_factory=Apps, description="The apps, each on its own subdomain.")
    monitoring: Monitoring = Field(default_factory=Monitoring, description="collectd -> Graphite -> Grafana.")
    backup: Backup | None = Field(None, description="Encrypted rclone backups; omit to disable.")
    images: dict[str, Image] = Field(
        default_factory=dict, description="Image override per service (e.g. traefik: traefik:v3.7.15)."
    )

    @property
    def backup_state_dir(self) -> str:
        """Where backups keep their records; the monitoring stack reads the last success from there."""
        explicit = self.backup.state_dir if self.backup else None
        return explicit or f"{self.storage.mountpoint.rstrip('/')}/.homelab/backup"

    def published_ports(self) -> list[tuple[str, int]]:
        ports = [("edge.http_port", self.edge.http_port), ("edge.https_port", self.edge.https_port)]
        if self.apps.gitea.enabled:
            ports.append(("apps.gitea.ssh_port", self.apps.gitea.ssh_port))
        if self.apps.jenkins.enabled and self.apps.jenkins.agent_port:
            ports.append(("apps.jenkins.agent_port", self.apps.jenkins.agent_port))
        return ports
