"""Session fixtures of the single sign-on contract tests: the portal (LemonLDAP::NG) starts once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from homelab.plan_model import Plan
from tests.contract.edge_support import LocalCA, free_port
from tests.contract.sso_support import Portal, portal, sso_plan


@pytest.fixture(scope="session")
def sso_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("sso")


@pytest.fixture(scope="session")
def sso_port() -> int:
    """The edges' HTTPS port, in the rendered configuration (the portal's redirects name it)."""
    return free_port()


@pytest.fixture(scope="session")
def sso_pki(sso_folder: Path) -> LocalCA:
    return LocalCA(sso_folder / "pki")


@pytest.fixture(scope="session")
def sso_plans(sso_folder: Path, sso_port: int) -> dict[str, tuple[Plan, dict[str, str]]]:
    return {kind: sso_plan(sso_folder / kind, sso_port, kind=kind) for kind in ("nginx", "traefik")}


@pytest.fixture(scope="session")
def llng(sso_plans: dict[str, tuple[Plan, dict[str, str]]]) -> Iterator[Portal]:
    plan, secrets = sso_plans["nginx"]  # the portal's configuration does not depend on the edge's kind
    with portal(plan, secrets) as running_portal:
        yield running_portal
