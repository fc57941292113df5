"""The catalog refuses entries that name services or networks they do not have, and every setting an
entry names exists in the config model (a typo would otherwise fail only when that app is enabled)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from homelab.catalog import CatalogEntry, catalog_dir, entry
from homelab.config.models import Apps

SERVICE = {"image": "busybox:1.36"}


def _entry(**keys: Any) -> CatalogEntry:
    return CatalogEntry.model_validate({"name": "demo", "stack": "dev", "services": {"web": SERVICE}, **keys})


@pytest.mark.parametrize(
    ("keys", "problem"),
    [
        ({"networks": {"wbe": ["default"]}}, "networks.wbe: no service 'wbe'"),
        ({"networks": {"web": ["socket"]}}, "networks.web: unknown network 'socket'"),
        ({"route": {"service": "api", "port": 80}}, "route: no service 'api'"),
        (
            {"tcp_routes": [{"name": "ssh", "service": "sshd", "port": 22, "setting": "ssh_port"}]},
            "tcp_routes.ssh: no service 'sshd'",
        ),
    ],
)
def test_dangling_references_fail_when_the_catalog_loads(keys: dict[str, Any], problem: str) -> None:
    with pytest.raises(ValidationError, match=problem):
        _entry(**keys)


def test_settings_are_read_only_by_an_app_entry() -> None:
    with pytest.raises(ValidationError, match="only an app's entry"):
        _entry(route={"service": "web", "port": 80, "max_body_setting": "upload_limit"})
    demo = _entry(app="demo", route={"service": "web", "port": 80, "max_body_setting": "upload_limit"})
    assert demo.route is not None and demo.route.max_body_setting == "upload_limit"


def test_unknown_keys_are_refused() -> None:
    with pytest.raises(ValidationError, match="netwroks"):
        _entry(netwroks={"web": ["default"]})


def test_an_entry_declares_its_internal_networks() -> None:
    demo = _entry(networks={"web": ["default", "socket"]}, internal_networks=["socket"])
    assert demo.networks == {"web": ["default", "socket"]}


def test_every_shipped_entry_loads_and_names_real_settings() -> None:
    names = sorted(p.stem for p in catalog_dir().glob("*.yaml"))
    assert {"edge-traefik", "edge-nginx", "ddclient", "plex", "nextcloud", "gitea", "monitoring"} <= set(names)
    for name in names:
        e = entry(name)
        settings = Apps.model_fields[e.app].annotation if e.app else None
        named = [t.setting for t in e.tcp_routes]
        named += [e.route.max_body_setting] if e.route and e.route.max_body_setting else []
        assert not named or settings is not None, name
        for setting in named:
            assert setting in settings.model_fields, f"{name}: no setting {setting!r}"  # type: ignore[union-attr]


def test_every_app_setting_has_its_catalog_entry() -> None:
    for name in Apps.model_fields:
        e = entry(name)
        assert (e.app, e.name) == (name, name)
