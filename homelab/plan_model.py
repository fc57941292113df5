"""The Plan's records: stacks, services, routes, datasets and secrets of one config, as pure data.

Built by homelab/plan.py (and a catalog entry's hook, homelab/apps/, through AppContext); read by every
renderer and verb. Apart from the builder so the hooks and the budget can name the records without
importing the builder that calls them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from homelab.catalog import CatalogEntry
from homelab.config.models import Config
from homelab.config.resources import Resources
from homelab.layout import EDGE_STACK, secret_name
from homelab.monitoring.inventory import Inventory
from homelab.profiles import Profile

STACK_ORDER = (EDGE_STACK, "sso", "media", "cloud", "dev", "monitoring")
CARBON_PORT = 2003
SECRETS_MOUNT = "/run/secrets"  # where compose mounts a service's secrets


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
    kind: Literal["token", "rsa"] = "token"  # what is generated: a random token, or an RSA private key (PEM)


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
    read_only: bool = False
    cap_add: list[str] = field(default_factory=list)
    cap_drop: list[str] = field(default_factory=list)
    resources: Resources | None = None
    network_mode: str | None = None
    networks: list[str] = field(default_factory=list)
    depends_on: list[str] = field(default_factory=list)
    healthcheck: dict[str, Any] | None = None


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
    inventory: Inventory | None = None  # the sensors `homelab monitor discover` found (monitoring.inventory)
    # certificate name sets past staging (homelab.certs.staging.with_stages): the edge orders them from production
    production_ready: frozenset[frozenset[str]] = frozenset()

    def route_for(self, stack: str, service: str) -> Route | None:
        return next((r for r in self.routes if r.stack == stack and r.service == service), None)

    def tcp_routes_for(self, stack: str, service: str) -> list[TcpRoute]:
        return [r for r in self.tcp_routes if r.stack == stack and r.service == service]


@dataclass
class AppContext:
    """What a catalog entry's hook (homelab/apps/<entry>.py) reads and changes while the plan is built:
    the entry's services as its catalog data made them, and the plan so far (config, profile, routes,
    TCP routes, the secret table)."""

    plan: Plan
    entry: CatalogEntry
    services: dict[str, Service]
    secret_path: Callable[[str], Path]  # a secret file named in the config -> its path

    @property
    def config(self) -> Config:
        return self.plan.config

    def pass_user_secret(self, service: Service, variable: str, name: str, relative: str) -> None:
        """Hand the user's secret file `relative` to `service` as this entry's secret `name`, its path
        in the `variable` environment variable (never the value: it would show in `docker inspect`)."""
        secret = secret_name(self.entry.owner, name)
        self.plan.secrets[secret] = Secret(secret, str(self.secret_path(relative)))
        service.secrets.append((secret, None))
        service.environment[variable] = f"{SECRETS_MOUNT}/{secret}"

    def mount_rendered_secret(self, service: Service, secret: str, target: str) -> None:
        """Mount the secret file a renderer writes (a config holding a credential) at `target`."""
        self.plan.secrets[secret] = Secret(secret, None)
        service.secrets.append((secret, target))
