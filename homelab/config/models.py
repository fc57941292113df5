"""The one config model. Every key a user can write in homelab.yaml is declared here, with its doc.

The config reference (docs/config-reference.md) is generated from them: a field's description is user documentation.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from homelab.config.base import Model
from homelab.config.dns01 import Exec, Httpreq, Rfc2136
from homelab.config.monitoring import Monitoring
from homelab.config.resources import Resources
from homelab.config.sso import Sso
from homelab.config.types import (
    AbsolutePath,
    BackendName,
    Cidr,
    DataFolder,
    DatasetName,
    DevicePath,
    DomainName,
    Email,
    EnvName,
    Hostname,
    HostPort,
    Id,
    Image,
    IpAddress,
    Login,
    MediaName,
    OnCalendar,
    OptionName,
    Port,
    ProviderName,
    SecretFile,
    Subdomain,
    Timezone,
    Url,
    ZfsProperty,
)


class Server(Model):
    hostname: Hostname = Field(description="Short host name of the server; also the collectd host name.")
    timezone: Timezone = Field(
        "UTC", description="tz database name passed to every container as TZ; must exist in the tz database."
    )
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
    dns_provider: ProviderName | None = Field(
        None, description="lego DNS provider code for the dns challenge, e.g. cloudflare, duckdns, namecheap."
    )
    dns_credentials: dict[EnvName, SecretFile] = Field(
        default_factory=dict,
        description="Provider variables -> secret files, e.g. {CF_DNS_API_TOKEN: secrets/cf-token}. "
        "Passed to the edge as VAR_FILE, never as values.",
    )
    rfc2136: Rfc2136 | None = Field(None, description="The DNS server and TSIG key for dns_provider rfc2136.")
    httpreq: Httpreq | None = Field(None, description="The HTTP endpoint and its credentials for dns_provider httpreq.")
    exec: Exec | None = Field(None, description="The program setting the TXT records for dns_provider exec.")
    staging: bool = Field(False, description="Use Let's Encrypt staging (untrusted certificates, high limits).")
    ca_server: Url | None = Field(
        None, description="ACME directory URL overriding production/staging (e.g. a Pebble test CA)."
    )
    ca_bundle: str | None = Field(
        None,
        min_length=1,
        description="PEM file (relative to homelab.yaml) of the CA certificates the edge trusts for the ACME "
        "directory's HTTPS, when ca_server is a private CA (step-ca, a company CA); mounted read-only.",
    )
    staging_first: bool = Field(
        True, description="Issue new names from the staging CA first, production once it did (docs/certificates.md)."
    )
    staging_ca_server: Url | None = Field(
        None,
        description="The staging-first CA when ca_server is set (e.g. a second Pebble); without it a custom "
        "ca_server is used directly.",
    )

    @model_validator(mode="after")
    def _dns_needs_provider(self) -> Acme:
        if self.challenge == "dns" and not self.dns_provider:
            raise ValueError("challenge 'dns' needs dns_provider")
        if self.challenge != "dns" and (self.dns_provider or self.dns_credentials):
            raise ValueError(f"dns_provider/dns_credentials only apply to challenge 'dns', not {self.challenge!r}")
        if (self.dns_provider == "rfc2136") != (self.rfc2136 is not None):
            raise ValueError("dns_provider 'rfc2136' and the rfc2136 section go together")
        if (self.dns_provider == "httpreq") != (self.httpreq is not None):
            raise ValueError("dns_provider 'httpreq' and the httpreq section go together")
        if (self.dns_provider == "exec") != (self.exec is not None):
            raise ValueError("dns_provider 'exec' and the exec section go together")
        return self


class Domain(Model):
    name: DomainName = Field(description="The domain the apps live under, e.g. example.com.")
    acme: Acme = Field(description="Let's Encrypt settings.")
    wildcard: bool = Field(
        False,
        description="One certificate for the domain and *.domain, served for every app (needs challenge dns); "
        "keeps the app names out of public certificate logs.",
    )


class Edge(Model):
    kind: Literal["traefik", "nginx"] = Field("traefik", description="The TLS reverse proxy: traefik or nginx.")
    http_port: Port = Field(80, description="Host port for HTTP (redirects to HTTPS; ACME http challenge).")
    https_port: Port = Field(443, description="Host port for HTTPS.")
    lan_cidrs: list[Cidr] = Field(
        default_factory=lambda: ["192.168.0.0/16", "10.0.0.0/8", "172.16.0.0/12"],
        min_length=1,
        description="Networks allowed to reach admin-only routes (e.g. Grafana); at least one "
        "(an empty list would lock everyone out of them).",
    )
    proxy_subnet: Cidr = Field(
        "172.30.250.0/24", description="Subnet of the shared proxy network (apps trust proxies from it)."
    )
    hsts_seconds: int = Field(63072000, ge=0, description="Strict-Transport-Security max-age.")
    encrypt_overlay: bool = Field(False, description="engine: swarm: IPsec on the proxy overlay (docs/swarm.md).")


DdnsProvider = Literal["dyndns2", "cloudflare", "namecheap", "duckdns"]


class Ddns(Model):
    enabled: bool = Field(True, description="Run ddclient to keep DNS pointed at the home IP.")
    provider: DdnsProvider = Field("dyndns2", description="dyndns2, cloudflare, namecheap or duckdns.")
    server: HostPort | None = Field(None, description="Update server, host[:port] (dyndns2; defaults per provider).")
    login: Login | None = Field(None, description="Account login (dyndns2), zone owner (namecheap: the domain).")
    password_file: SecretFile | None = Field(None, description="Secret file with the password or API token.")
    hostnames: list[Hostname] = Field(
        default_factory=list, description="Names to update; default: every enabled app's hostname."
    )
    zone: DomainName | None = Field(None, description="Cloudflare zone; default: domain.name.")
    interval: int = Field(300, ge=60, description="Seconds between IP checks.")
    check_ip_url: Url = Field("https://api.ipify.org", description="Web page that echoes the public IP.")

    @model_validator(mode="after")
    def _credentials(self) -> Ddns:
        if self.enabled and self.password_file is None:
            raise ValueError(f"provider {self.provider!r} needs password_file")
        if self.enabled and self.provider == "dyndns2" and not (self.login and self.server):
            raise ValueError("provider 'dyndns2' needs login and server")
        return self


class DatasetOverride(Model):
    name: DatasetName | None = Field(None, description="Full dataset name instead of <root>/<app>/<role>.")
    properties: dict[ZfsProperty, str] = Field(default_factory=dict, description="ZFS properties, e.g. recordsize: 1M.")


class Storage(Model):
    pool: DatasetName = Field("tank", description="ZFS pool name.")
    root: DatasetName = Field("tank/homelab", description="Parent dataset of every app dataset.")
    mountpoint: DataFolder = Field(
        "/tank/homelab",
        description="Where the root dataset is mounted on the host (absolute, normalised, no '..'; not under "
        "/proc, /sys, /dev or /run, nor inside homelab's output folders).",
    )
    datasets: dict[str, DatasetOverride] = Field(
        default_factory=dict, description="Overrides per dataset role, keyed '<app>/<role>' (e.g. plex/media)."
    )

    @model_validator(mode="after")
    def _root_in_pool(self) -> Storage:
        if self.root != self.pool and not self.root.startswith(self.pool + "/"):
            raise ValueError(f"root {self.root!r} is not inside pool {self.pool!r}")
        return self


class App(Model):
    enabled: bool = Field(True, description="Deploy this app.")
    resources: Resources | None = Field(None, description="Override the app service's catalog resources.")
    subdomain: Subdomain | None = Field(None, description="Host label under domain.name; default: the app name.")
    lan_only: bool = Field(False, description="Only the edge.lan_cidrs may reach this app.")


class Plex(App):
    claim_token_file: SecretFile | None = Field(
        None, description="Secret file with a claim token from plex.tv/claim (first start only)."
    )
    transcode_device: DevicePath | None = Field(
        "/dev/dri", description="Device for hardware transcoding (Quick Sync), a path under /dev; null to disable."
    )
    media_paths: dict[MediaName, AbsolutePath] = Field(
        default_factory=dict, description="Extra read-only host folders: name -> host path, mounted at /data/<name>."
    )


class Nextcloud(App):
    admin_user: str = Field("admin", pattern=r"^[A-Za-z0-9_.@-]+$", description="First admin account name.")
    upload_limit: str = Field("16G", pattern=r"^\d+[KMG]$", description="Largest upload (PHP and the edge).")
    cron: bool = Field(True, description="Run background jobs in a cron container (recommended).")


class Gitea(App):
    ssh_port: Port = Field(2222, description="Host port the edge forwards to Gitea's SSH server.")
    open_registration: bool = Field(False, description="Let anyone sign up (closed by default).")
    admin_user: str = Field("gitea-admin", pattern=r"^[A-Za-z0-9_.-]+$", description="Site admin made at first up.")


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


class BackupRemote(Model):
    type: BackendName = Field(description="rclone backend type, e.g. b2, s3, sftp, webdav, local.")
    path: str = Field(description="Bucket/folder on the remote, e.g. my-bucket/nas.")
    options: dict[OptionName, str] = Field(default_factory=dict, description="Non-secret rclone backend options.")
    secret_options: dict[OptionName, SecretFile] = Field(
        default_factory=dict, description="rclone backend options read from secret files (e.g. key: secrets/b2-key)."
    )


class Retention(Model):
    hourly: int = Field(24, ge=0, description="Hourly snapshots kept.")
    daily: int = Field(30, ge=0, description="Daily snapshots kept.")
    monthly: int = Field(12, ge=0, description="Monthly snapshots kept.")


class Backup(Model):
    enabled: bool = Field(True, description="Back up the app datasets with rclone crypt.")
    remotes: dict[Subdomain, BackupRemote] = Field(default_factory=dict, description="Named rclone remotes.")
    schedule: OnCalendar = Field(
        "*-*-* 03:00:00",
        description="systemd OnCalendar for the backup timer, checked against systemd's grammar "
        "(e.g. '*-*-* 03:00:00', 'Mon..Fri 02:30', 'daily').",
    )
    retention: Retention = Field(default_factory=Retention, description="Snapshots kept per period.")
    datasets: list[str] | None = Field(
        None, description="Dataset roles ('<app>/<role>') to back up; default: every role marked for backup."
    )
    crypt_password_file: SecretFile | None = Field(
        None, description="Secret file with the crypt password; generated (back it up!) when absent."
    )
    crypt_salt_file: SecretFile | None = Field(None, description="Secret file with the crypt salt; generated too.")
    stall_timeout: int = Field(
        300,
        ge=10,
        description="Seconds a transfer may make no progress (a remote lost mid-run) before the run stops "
        "with an error and releases its lock.",
    )
    sentinels: bool = Field(True, description="Write each app's sentinel before a run; recover reads it back.")
    recovery_drill_days: int = Field(31, ge=1, description="Age at which the last good recovery drill alerts.")
    state_dir: DataFolder | None = Field(
        None,
        description="Run records, file listings and the rclone config (0600); collectd reads "
        "<remote>.last_success here. Default: <storage.mountpoint>/.homelab/backup.",
    )

    @model_validator(mode="after")
    def _remote_present(self) -> Backup:
        if self.enabled and not self.remotes:
            raise ValueError("backup is enabled but no remotes are configured")
        return self


class Certs(Model):
    public_address: IpAddress | None = Field(None, description="Public IP (what ddclient reports) to check.")


class Config(Model):
    version: Literal[1] = Field(description="Config format version; 1.")
    engine: Literal["compose", "swarm"] = Field("compose", description="compose, or swarm: see docs/swarm.md.")
    server: Server = Field(description="The box itself.")
    domain: Domain = Field(description="Public names and certificates.")
    edge: Edge = Field(default_factory=Edge, description="The TLS reverse proxy.")
    ddns: Ddns | None = Field(None, description="Dynamic DNS (ddclient); omit to manage DNS yourself.")
    storage: Storage = Field(default_factory=Storage, description="ZFS datasets for app data.")
    apps: Apps = Field(default_factory=Apps, description="The apps, each on its own subdomain.")
    monitoring: Monitoring = Field(default_factory=Monitoring, description="collectd -> Graphite -> Grafana.")
    backup: Backup | None = Field(None, description="Encrypted rclone backups; omit to disable.")
    certs: Certs = Field(default_factory=Certs, description="Certificate preflight and rate-limit guard.")
    sso: Sso = Field(default_factory=Sso, description="Single sign-on in front of the apps (docs/sso.md).")
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
