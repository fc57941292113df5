"""Config + hardware profile + catalog -> Plan: pure data, no I/O.

The Plan is the single source every renderer reads: the same route list becomes Traefik labels or
NGINX server blocks, the same dataset list becomes bind mounts, `zfs create` commands and the
backup set, the same secret list becomes compose secrets and files in the secrets folder.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import PurePosixPath

from homelab import apps
from homelab.catalog import CatalogEntry, ServiceSpec, TcpRouteSpec, app_names, entry
from homelab.config.loaded import LoadedConfig
from homelab.config.models import App, Config
from homelab.config.resources import Resources
from homelab.errors import ConfigError
from homelab.images.budget import over_budget
from homelab.layout import EDGE_STACK, PROXY_NETWORK, secret_name
from homelab.monitoring.inventory import of_config as inventory_of
from homelab.plan_model import (
    CARBON_PORT,
    SECRETS_MOUNT,
    STACK_ORDER,
    AppContext,
    Dataset,
    Mount,
    Plan,
    Route,
    Secret,
    Service,
    Stack,
    TcpRoute,
)
from homelab.profiles import load_profile

SSO_APP = "sso"  # the portal's route: app, stack and service name


def _entries(config: Config) -> list[CatalogEntry]:
    names = [f"edge-{config.edge.kind}"]
    if config.ddns and config.ddns.enabled:
        names.append("ddclient")
    names += [app for app in app_names() if getattr(config.apps, app).enabled]
    if config.monitoring.enabled:
        names.append("monitoring")
    if config.sso.enabled:
        names.append(SSO_APP)
    return [entry(name) for name in names]


def _hostname(config: Config, label: str) -> str:
    return f"{label}.{config.domain.name}"


def build_plan(loaded: LoadedConfig, extra_entries: tuple[str, ...] = ()) -> Plan:
    """`extra_entries`: catalog entries no config key enables (local mode's CA, homelab/local.py)."""
    config = loaded.config
    entries = _entries(config) + [entry(name) for name in extra_entries]
    plan = Plan(
        config=config,
        profile=load_profile(config.server.profile),
        stacks={},
        routes=[_route(config, e) for e in entries if e.route] + _portal_route(config),
        tcp_routes=[_tcp_route(config, e, spec) for e in entries for spec in e.tcp_routes],
        datasets=[_dataset(config, e, role) for e in entries for role in e.datasets],
        secrets={},
        inventory=inventory_of(loaded),
    )
    forwards_tcp = any(e.forwards_tcp for e in entries)
    for e in entries:
        _add_entry(plan, loaded, e, forwards_tcp=forwards_tcp)
    _set_secret_owners(plan.stacks, plan.secrets)
    # Dependency order (the edge first); a stack STACK_ORDER does not know comes last, in catalog order.
    rank = {name: index for index, name in enumerate(STACK_ORDER)}
    plan.stacks = {name: plan.stacks[name] for name in sorted(plan.stacks, key=lambda n: rank.get(n, len(rank)))}
    if problems := over_budget(plan, loaded):
        raise ConfigError(problems)
    return plan


def _add_entry(plan: Plan, loaded: LoadedConfig, e: CatalogEntry, *, forwards_tcp: bool) -> None:
    """The entry's services from its catalog data, then its hook; its secrets and networks."""
    config = plan.config
    if e.stack not in plan.stacks:
        plan.stacks[e.stack] = _stack(e.stack, {r.stack for r in plan.routes}, config)
    stack = plan.stacks[e.stack]
    stack.networks.update({name: {"internal": True} for name in e.internal_networks})
    for name in [*e.generated_secrets, *e.rendered_secrets]:
        plan.secrets[secret_name(e.owner, name)] = Secret(secret_name(e.owner, name), None)
    services = {name: _service(loaded, e, name, spec, plan.routes) for name, spec in e.services.items()}
    for service in services.values():
        service.networks = _networks(e, service, plan.routes)
        if not forwards_tcp:  # the edge cannot forward them: the service publishes its TCP routes itself
            service.ports += [f"{t.public_port}:{t.port}" for t in plan.tcp_routes_for(e.stack, service.name)]
    customize = apps.hook(e.name)
    if customize:
        customize(AppContext(plan, e, services, loaded.secret_path))
    stack.services.update(services)


def _stack(name: str, routed: set[str], config: Config) -> Stack:
    """A stack's own network, and the proxy network: the edge creates it, routed stacks join it."""
    stack = Stack(name, networks={"default": {}})
    if name == EDGE_STACK:
        stack.networks["proxy"] = {"name": PROXY_NETWORK, "ipam": {"config": [{"subnet": config.edge.proxy_subnet}]}}
    elif name in routed:
        stack.networks["proxy"] = {"name": PROXY_NETWORK, "external": True}
    return stack


def _networks(e: CatalogEntry, service: Service, routes: list[Route]) -> list[str]:
    """The entry's choice, else its stack's own network, plus the proxy network when routed."""
    if service.network_mode:
        return []
    if service.name in e.networks:
        return list(e.networks[service.name])
    routed = any(r.stack == e.stack and r.service == service.name for r in routes)
    return ["default", "proxy"] if routed else ["default"]


def _tcp_route(config: Config, e: CatalogEntry, spec: TcpRouteSpec) -> TcpRoute:
    public_port: int = getattr(_settings(config, e), spec.setting)
    return TcpRoute(f"{e.owner}-{spec.name}", e.stack, spec.service, public_port, spec.port)


def _settings(config: Config, e: CatalogEntry) -> App:
    assert e.app, f"{e.name}: only an app's entry reads app settings"
    settings: App = getattr(config.apps, e.app)
    return settings


def _portal_route(config: Config) -> list[Route]:
    """The single sign-on portal's name, served by the edge like an app's (never behind forward-auth)."""
    if not config.sso.enabled:
        return []
    return [Route(app=SSO_APP, stack=SSO_APP, service=SSO_APP, host=_hostname(config, config.sso.subdomain), port=80)]


def _route(config: Config, e: CatalogEntry) -> Route:
    assert e.route is not None
    if e.app:
        settings = _settings(config, e)
        label, lan_only = settings.subdomain or e.app, settings.lan_only or e.route.lan_only
    else:  # monitoring: Grafana is always LAN-only
        label, lan_only = config.monitoring.subdomain, True
    setting = e.route.max_body_setting
    max_body: str | None = getattr(_settings(config, e), setting) if setting else None
    return Route(
        app=e.owner,
        stack=e.stack,
        service=e.route.service,
        host=_hostname(config, label),
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
        **{f"{t.name}_port": str(getattr(_settings(config, e), t.setting)) for t in e.tcp_routes},
        "storage_mountpoint": config.storage.mountpoint,
        "carbon_port": str(CARBON_PORT),
    }


def _service(loaded: LoadedConfig, e: CatalogEntry, name: str, spec: ServiceSpec, routes: list[Route]) -> Service:
    config = loaded.config
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
        environment[env_var] = f"{SECRETS_MOUNT}/{secret_name(e.owner, secret)}"
        secrets.append((secret_name(e.owner, secret), None))
    secrets += [(secret_name(e.owner, secret), None) for secret in spec.mount_secrets]
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
        read_only=spec.read_only,
        cap_add=list(spec.cap_add),
        cap_drop=list(spec.cap_drop),
        resources=(spec.resources or Resources()).overridden_by(
            _app_resources(config, name), f"{loaded.where(('apps', name, 'resources'))}: apps.{name}.resources"
        ),
        network_mode=spec.network_mode,
        depends_on=list(spec.depends_on),
        healthcheck=spec.healthcheck.model_dump() if spec.healthcheck else None,
    )


def _app_resources(config: Config, service: str) -> Resources | None:
    """`apps.<app>.resources` applies to the app's own service (nextcloud, not its db or cron)."""
    return getattr(config.apps, service).resources if service in app_names() else None


def _set_secret_owners(stacks: dict[str, Stack], secrets: dict[str, Secret]) -> None:
    """A bind-mounted secret is read with the file's own mode (compose ignores uid/mode for file
    secrets), so a secret read by a non-root service must be owned by the uid that service runs as."""
    for stack in stacks.values():
        for service in stack.services.values():
            if not service.user:
                continue
            uid, _, gid = service.user.partition(":")
            for name, _target in service.secrets:
                old = secrets[name]
                secrets[name] = replace(old, owner_uid=int(uid), owner_gid=int(gid or uid))
