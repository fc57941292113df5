"""Config + hardware profile + catalog -> Plan: pure data, no I/O.

The Plan is the single source every renderer reads: the same route list becomes Traefik labels or
NGINX server blocks, the same dataset list becomes bind mounts, `zfs create` commands and the
backup set, the same secret list becomes compose secrets and files in the secrets folder.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from homelab.catalog import APPS, CatalogEntry, ServiceSpec, entry
from homelab.config.loader import LoadedConfig
from homelab.config.models import Config
from homelab.profiles import Profile, load_profile

STACK_ORDER = ("edge", "media", "cloud", "dev", "monitoring")
PROXY_NETWORK = "homelab-proxy"
CARBON_PORT = 2003


@dataclass(frozen=True)
class Dataset:
    owner: str  # app or stack
    role: str
    name: str  # ZFS dataset name
    path: str  # host mountpoint
    properties: dict[str, str]
    uid: int
    gid: int
    backup: bool
    why: str

    @property
    def key(self) -> str:
        return f"{self.owner}/{self.role}"


@dataclass(frozen=True)
class Secret:
    """One secret file in the secrets folder: generated once, or copied from a file the user named."""

    name: str
    source: str | None  # absolute path of the user's file; None = generate
    owner_uid: int = 0
    owner_gid: int = 0


@dataclass(frozen=True)
class Route:
    app: str
    stack: str
    service: str
    host: str
    port: int
    websocket: bool = False
    well_known_dav: bool = False
    lan_only: bool = False
    max_body: str | None = None  # None: the edge's default (no limit for Traefik)


@dataclass(frozen=True)
class TcpRoute:
    """A raw TCP port the edge forwards to a service (Gitea's SSH), so only the edge publishes ports."""

    name: str
    stack: str
    service: str
    public_port: int
    port: int


@dataclass
class Mount:
    source: str  # host path, or path relative to the stack folder for rendered config
    target: str
    read_only: bool


@dataclass
class Service:
    name: str
    image: str
    build: str | None = None
    user: str | None = None
    entrypoint: list[str] | None = None
    command: list[str] | None = None
    environment: dict[str, str] = field(default_factory=dict)
    secrets: list[tuple[str, str | None]] = field(default_factory=list)  # (secret name, target path or None)
    mounts: list[Mount] = field(default_factory=list)
    ports: list[str] = field(default_factory=list)
    devices: list[str] = field(default_factory=list)
    tmpfs: list[str] = field(default_factory=list)
    cap_add: list[str] = field(default_factory=list)
    network_mode: str | None = None
    networks: list[str] = field(default_factory=list)
    depends_on: list[str] = field(default_factory=list)
    healthcheck: dict[str, Any] | None = None
    labels: dict[str, str] = field(default_factory=dict)


@dataclass
class Stack:
    name: str
    services: dict[str, Service] = field(default_factory=dict)
    networks: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass
class Plan:
    config: Config
    profile: Profile
    stacks: dict[str, Stack]
    routes: list[Route]
    tcp_routes: list[TcpRoute]
    datasets: list[Dataset]
    secrets: dict[str, Secret]

    def route_for(self, stack: str, service: str) -> Route | None:
        return next((r for r in self.routes if r.stack == stack and r.service == service), None)

    def tcp_routes_for(self, stack: str, service: str) -> list[TcpRoute]:
        return [r for r in self.tcp_routes if r.stack == stack and r.service == service]


def _entries(config: Config) -> list[CatalogEntry]:
    names = ["edge-traefik" if config.edge.kind == "traefik" else "edge-nginx"]
    if config.ddns and config.ddns.enabled:
        names.append("ddclient")
    names += [app for app in APPS if getattr(config.apps, app).enabled]
    if config.monitoring.enabled:
        names.append("monitoring")
    return [entry(name) for name in names]


def hostname_for(config: Config, label: str) -> str:
    return f"{label}.{config.domain.name}"


def build_plan(loaded: LoadedConfig) -> Plan:
    config = loaded.config
    profile = load_profile(config.server.profile)
    entries = _entries(config)
    routes = [_route(config, e) for e in entries if e.route]
    tcp_routes = _tcp_routes(config)
    datasets = [_dataset(config, e, role) for e in entries for role in e.datasets]
    secrets: dict[str, Secret] = {}
    stacks: dict[str, Stack] = {}
    for e in entries:
        stack = stacks.setdefault(e.stack, Stack(e.stack))
        for name in e.generated_secrets:
            secrets[f"{e.owner}_{name}"] = Secret(f"{e.owner}_{name}", None)
        for service_name, spec in e.services.items():
            service = _service(config, e, service_name, spec, routes)
            _apply_options(config, loaded, e, service, secrets)
            stack.services[service_name] = service
    _wire_networks(stacks, routes, config)
    _set_secret_owners(stacks, secrets)
    ordered = {name: stacks[name] for name in STACK_ORDER if name in stacks}
    return Plan(config, profile, ordered, routes, tcp_routes, datasets, secrets)


def _tcp_routes(config: Config) -> list[TcpRoute]:
    if not config.apps.gitea.enabled:
        return []
    return [TcpRoute("gitea-ssh", "dev", "gitea", config.apps.gitea.ssh_port, 2222)]


def _route(config: Config, e: CatalogEntry) -> Route:
    assert e.route is not None
    if e.app:
        settings = getattr(config.apps, e.app)
        label, lan_only = settings.subdomain or e.app, settings.lan_only or e.route.lan_only
    else:  # monitoring: Grafana is always LAN-only
        label, lan_only = config.monitoring.subdomain, True
    max_body = config.apps.nextcloud.upload_limit if e.app == "nextcloud" else None
    return Route(
        app=e.owner,
        stack=e.stack,
        service=e.route.service,
        host=hostname_for(config, label),
        port=e.route.port,
        websocket=e.route.websocket,
        well_known_dav=e.route.well_known_dav,
        lan_only=lan_only,
        max_body=max_body,
    )


def _dataset(config: Config, e: CatalogEntry, role: str) -> Dataset:
    spec = e.datasets[role]
    key = f"{e.owner}/{role}"
    override = config.storage.datasets.get(key)
    name = override.name if override and override.name else f"{config.storage.root}/{key}"
    relative = (
        PurePosixPath(name).relative_to(config.storage.root) if name.startswith(config.storage.root + "/") else None
    )
    path = str(PurePosixPath(config.storage.mountpoint) / relative) if relative else f"/{name}"
    properties = {"atime": "off", "compression": "lz4", "xattr": "sa", "acltype": "posix"}
    if spec.recordsize:
        properties["recordsize"] = spec.recordsize
    if spec.logbias:
        properties["logbias"] = spec.logbias
    if override:
        properties.update(override.properties)
    return Dataset(
        owner=e.owner,
        role=role,
        name=name,
        path=path,
        properties=properties,
        uid=config.server.uid if spec.uid is None else spec.uid,
        gid=config.server.gid if spec.gid is None else spec.gid,
        backup=spec.backup,
        why=spec.why,
    )


def _placeholders(config: Config, e: CatalogEntry, routes: list[Route]) -> dict[str, str]:
    route = next((r for r in routes if r.app == e.owner), None)
    return {
        "uid": str(config.server.uid),
        "gid": str(config.server.gid),
        "host": route.host if route else "",
        "lan_cidrs": ",".join(config.edge.lan_cidrs),
        "proxy_subnet": config.edge.proxy_subnet,
        "ssh_port": str(config.apps.gitea.ssh_port),
        "storage_mountpoint": config.storage.mountpoint,
        "carbon_port": str(CARBON_PORT),
    }


def _service(config: Config, e: CatalogEntry, name: str, spec: ServiceSpec, routes: list[Route]) -> Service:
    values = _placeholders(config, e, routes)

    def fill(text: str) -> str:
        return text.format_map(values)

    environment = {"TZ": config.server.timezone}
    environment.update({key: values[source] for key, source in spec.user_env.items()})
    environment.update({key: fill(value) for key, value in spec.environment.items()})
    mounts = []
    for m in spec.mounts:
        if m.dataset:
            source, read_only = _dataset(config, e, m.dataset).path, bool(m.read_only)
        elif m.config:
            source, read_only = f"./{m.config}", m.read_only is not False
        elif m.storage_root:
            source, read_only = config.storage.mountpoint, m.read_only is not False
        else:
            assert m.host
            source, read_only = m.host, m.read_only is not False
        mounts.append(Mount(source, fill(m.target), read_only))
    secrets: list[tuple[str, str | None]] = []
    for env_var, secret in spec.secrets.items():
        secret_name = f"{e.owner}_{secret}"
        environment[env_var] = f"/run/secrets/{secret_name}"
        secrets.append((secret_name, None))
    secrets += [(f"{e.owner}_{secret}", None) for secret in spec.mount_secrets]
    return Service(
        name=name,
        image=config.images.get(name, spec.image),
        build=spec.build,
        user=fill(spec.user) if spec.user else None,
        entrypoint=list(spec.entrypoint) if spec.entrypoint else None,  # shell text: never templated
        command=spec.command,
        environment=environment,
        secrets=secrets,
        mounts=mounts,
        ports=[fill(p) for p in spec.ports],
        tmpfs=list(spec.tmpfs),
        cap_add=list(spec.cap_add),
        network_mode=spec.network_mode,
        depends_on=list(spec.depends_on),
        healthcheck=spec.healthcheck.model_dump() if spec.healthcheck else None,
    )


def _apply_options(
    config: Config, loaded: LoadedConfig, e: CatalogEntry, service: Service, secrets: dict[str, Secret]
) -> None:
    """Per-app options that are logic rather than data."""

    def user_secret(name: str, relative: str) -> str:
        secret_name = f"{e.owner}_{name}"
        secrets[secret_name] = Secret(secret_name, str(loaded.secret_path(relative)))
        return secret_name

    if service.name == "plex":
        plex = config.apps.plex
        if plex.transcode_device:
            service.devices.append(f"{plex.transcode_device}:{plex.transcode_device}")
        if plex.claim_token_file:
            secret = user_secret("claim_token", plex.claim_token_file)
            service.secrets.append((secret, None))
            service.environment["PLEX_CLAIM_FILE"] = f"/run/secrets/{secret}"
        for name, host_path in sorted(plex.media_paths.items()):
            service.mounts.append(Mount(host_path, f"/data/{name}", True))
    elif service.name == "nextcloud":
        nextcloud = config.apps.nextcloud
        service.environment["NEXTCLOUD_ADMIN_USER"] = nextcloud.admin_user
        service.environment["PHP_UPLOAD_LIMIT"] = nextcloud.upload_limit
    elif service.name == "gitea" and config.edge.kind == "nginx":
        # Debian's and the official NGINX builds differ on the stream module: Gitea publishes SSH itself
        service.ports.append(f"{config.apps.gitea.ssh_port}:2222")
    elif service.name == "jenkins" and config.apps.jenkins.agent_port:
        service.ports.append(f"{config.apps.jenkins.agent_port}:50000")
    elif service.name == "traefik":
        acme = config.domain.acme
        service.ports += [f"{config.edge.http_port}:80", f"{config.edge.https_port}:443"]
        service.ports += [f"{r.public_port}:{r.public_port}" for r in _tcp_routes(config)]
        for variable, relative in sorted(acme.dns_credentials.items()):
            secret = user_secret(f"acme_{variable.lower()}", relative)
            service.secrets.append((secret, None))
            service.environment[f"{variable}_FILE"] = f"/run/secrets/{secret}"
    elif service.name == "nginx":
        service.ports += [f"{config.edge.http_port}:80", f"{config.edge.https_port}:443"]
    elif service.name == "ddclient":
        secrets["edge_ddclient_conf"] = Secret("edge_ddclient_conf", None)
    elif service.name == "collectd":
        ipmi = config.monitoring.ipmi
        if ipmi.mode == "local":
            service.devices.append("/dev/ipmi0:/dev/ipmi0")
        if ipmi.mode == "lan":
            # collectd's ipmi plugin takes the BMC password only inline: the block lives in a secret file
            secrets["monitoring_collectd_ipmi_conf"] = Secret("monitoring_collectd_ipmi_conf", None)
            service.secrets.append(("monitoring_collectd_ipmi_conf", "/etc/collectd/ipmi.conf"))
        disks = config.monitoring.disks or load_profile(config.server.profile).disks
        service.devices += [f"/dev/{disk}:/dev/{disk}" for disk in disks]
    elif service.name == "grafana":
        secrets["monitoring_grafana_admin_password"] = Secret("monitoring_grafana_admin_password", None)


def _wire_networks(stacks: dict[str, Stack], routes: list[Route], config: Config) -> None:
    """Routed services and the edge share one proxy network; the Docker API is reachable only on an
    internal network between Traefik and the socket proxy; everything else stays on its stack's own."""
    routed = {(r.stack, r.service) for r in routes}
    for stack in stacks.values():
        stack.networks["default"] = {}
        if stack.name == "edge":
            stack.networks["proxy"] = {
                "name": PROXY_NETWORK,
                "ipam": {"config": [{"subnet": config.edge.proxy_subnet}]},
            }
        elif any(stack.name == s for s, _ in routed):
            stack.networks["proxy"] = {"name": PROXY_NETWORK, "external": True}
        for service in stack.services.values():
            if service.network_mode:
                continue
            if service.name == "socket-proxy":
                service.networks = ["socket"]
            elif service.name == "traefik":
                service.networks = ["proxy", "socket"]
                stack.networks["socket"] = {"internal": True}
            elif service.name == "nginx":
                service.networks = ["proxy"]
            elif (stack.name, service.name) in routed:
                service.networks = ["default", "proxy"]
            else:
                service.networks = ["default"]


def _set_secret_owners(stacks: dict[str, Stack], secrets: dict[str, Secret]) -> None:
    """A bind-mounted secret is read with the file's own mode (compose ignores uid/mode for file
    secrets), so a secret read by a non-root service must be owned by the uid that service runs as."""
    for stack in stacks.values():
        for service in stack.services.values():
            if not service.user:
                continue
            uid, _, gid = service.user.partition(":")
            for secret_name, _target in service.secrets:
                old = secrets[secret_name]
                secrets[secret_name] = Secret(old.name, old.source, int(uid), int(gid or uid))
