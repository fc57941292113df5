"""The app catalog: one YAML file per app or infrastructure unit (the top-level `compose/` folder).

An entry is data: its services (image, environment, mounts by dataset role, healthcheck...), the
dataset roles it owns and their ZFS properties, the secrets it needs generated, and its route.
`plan.py` turns entries plus the config into concrete services; options that need logic live there.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

APPS = ("plex", "nextcloud", "gitea", "jenkins", "rstudio")


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Mount(_Entry):
    target: str
    dataset: str | None = None  # a dataset role of this entry
    config: str | None = None  # a rendered file/folder of this stack, relative to the stack folder
    host: str | None = None  # a fixed host path (only the socket proxy has one)
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
    cap_add: list[str] = Field(default_factory=list)
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


class CatalogEntry(_Entry):
    name: str
    stack: str
    app: str | None = None
    route: RouteSpec | None = None
    datasets: dict[str, DatasetSpec] = Field(default_factory=dict)
    generated_secrets: list[str] = Field(default_factory=list)
    services: dict[str, ServiceSpec]

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
    data: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    return CatalogEntry.model_validate({"name": name, **data})


def app_names() -> tuple[str, ...]:
    return APPS
