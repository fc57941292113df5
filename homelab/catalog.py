"""The app catalog: one YAML file per app or infrastructure unit (the top-level `compose/` folder).

An entry is data: its services (image, environment, mounts by dataset role, healthcheck...), the
dataset roles it owns and their ZFS properties, the secrets it needs generated or rendered, its
route and TCP routes, and the networks its services join. `plan.py` turns entries plus the config
into concrete services; an option that needs logic lives in the entry's hook, homelab/apps/<entry>.py.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from homelab.config.models import Apps
from homelab.config.resources import Resources
from homelab.yamlio import safe_load

# The apps, in the order of their config section: each has an `apps.<name>` settings model and an
# entry compose/<name>.yaml with `app: <name>`.
APPS = tuple(Apps.model_fields)


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Mount(_Entry):
    target: str
    dataset: str | None = None  # a dataset role of this entry
    config: str | None = None  # a rendered file/folder of this stack, relative to the stack folder
    host: str | None = None  # a fixed host path (the socket proxy's Docker socket, collectd's cgroups)
    storage_root: bool = False  # the whole storage root (collectd's df needs to see every dataset)
    read_only: bool | None = None


class Healthcheck(_Entry):
    test: list[str]
    interval: str = "30s"
    timeout: str = "10s"
    retries: int = 5
    start_period: str = "30s"


class ServiceSpec(_Entry):
    image: str
    build: str | None = None
    user: str | None = None
    user_env: dict[str, Literal["uid", "gid"]] = Field(default_factory=dict)
    entrypoint: list[str] | None = None
    command: list[str] | None = None
    environment: dict[str, str] = Field(default_factory=dict)
    secrets: dict[str, str] = Field(default_factory=dict)  # ENV_VAR -> secret, passed as a file path
    mount_secrets: list[str] = Field(default_factory=list)  # secrets mounted without an env var
    mounts: list[Mount] = Field(default_factory=list)
    ports: list[str] = Field(default_factory=list)
    tmpfs: list[str] = Field(default_factory=list)
    read_only: bool = False  # read-only root filesystem; `tmpfs` holds what the image writes outside its mounts
    cap_add: list[str] = Field(default_factory=list)
    cap_drop: list[str] = Field(default_factory=list)
    resources: Resources | None = None  # every shipped service states one (tests/unit/test_resources.py)
    network_mode: str | None = None
    depends_on: list[str] = Field(default_factory=list)
    healthcheck: Healthcheck | None = None


class DatasetSpec(_Entry):
    why: str
    backup: bool
    uid: int | None = None  # None: the configured server uid/gid
    gid: int | None = None
    recordsize: str | None = None
    logbias: str | None = None


class RouteSpec(_Entry):
    service: str
    port: int
    websocket: bool = False
    well_known_dav: bool = False
    lan_only: bool = False
    max_body_setting: str | None = None  # the app setting holding the largest request body the edge accepts


class TcpRouteSpec(_Entry):
    """A raw TCP port the edge forwards to a service; the host port is an app setting."""

    name: str  # the route is `<app>-<name>`; `{<name>_port}` in this entry's text is the host port
    service: str
    port: int  # inside the container
    setting: str  # the app setting holding the host port


# The networks a service may join: its stack's own, the edge's proxy network, or an internal one
# the entry declares. The default (no entry in `networks`): its stack's own, plus proxy when routed.
STANDARD_NETWORKS = ("default", "proxy")


class CatalogEntry(_Entry):
    name: str
    stack: str
    app: str | None = None
    route: RouteSpec | None = None
    datasets: dict[str, DatasetSpec] = Field(default_factory=dict)
    generated_secrets: list[str] = Field(default_factory=list)
    rendered_secrets: list[str] = Field(default_factory=list)  # a renderer writes them (whole config files)
    tcp_routes: list[TcpRouteSpec] = Field(default_factory=list)
    forwards_tcp: bool = False  # an edge whose proxy forwards the TCP routes (else each service publishes its own)
    networks: dict[str, list[str]] = Field(default_factory=dict)  # service -> networks, instead of the default
    internal_networks: list[str] = Field(default_factory=list)  # networks with no way out, between services
    services: dict[str, ServiceSpec]

    @model_validator(mode="after")
    def _references_resolve(self) -> CatalogEntry:
        """Every service and network a key names exists: a typo fails when the catalog loads."""
        named = [("route", self.route.service)] if self.route else []
        named += [(f"tcp_routes.{t.name}", t.service) for t in self.tcp_routes]
        named += [(f"networks.{service}", service) for service in self.networks]
        problems = [f"{where}: no service {service!r}" for where, service in named if service not in self.services]
        if not self.app and (self.tcp_routes or (self.route and self.route.max_body_setting)):
            problems.append("tcp_routes and route.max_body_setting read app settings: only an app's entry has them")
        known = {*STANDARD_NETWORKS, *self.internal_networks}
        for service, networks in self.networks.items():
            problems += [f"networks.{service}: unknown network {n!r}" for n in networks if n not in known]
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @property
    def owner(self) -> str:
        """The name datasets and secrets are filed under: the app, else the stack."""
        return self.app or self.stack


def catalog_dir() -> Path:
    installed = Path(__file__).parent / "_catalog"
    return installed if installed.is_dir() else Path(__file__).parent.parent / "compose"


@functools.cache
def entry(name: str) -> CatalogEntry:
    path = catalog_dir() / f"{name}.yaml"
    data: dict[str, Any] = safe_load(path.read_text(encoding="utf-8"))
    return CatalogEntry.model_validate({"name": name, **data})


def app_names() -> tuple[str, ...]:
    return APPS
