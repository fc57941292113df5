"""Session fixtures of the single sign-on contract tests: the portal (LemonLDAP::NG) starts once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from homelab.plan_model import Plan
from tests.contract.edge_support import Edge, LocalCA, free_port
from tests.contract.sso_support import Portal, portal, sso_edge, sso_plan


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


@pytest.fixture(scope="module")
def sso_edge_kind(request: pytest.FixtureRequest) -> str:
    """The module's SSO_EDGE (a module may override this fixture to run its tests on both kinds)."""
    return str(request.module.SSO_EDGE)


@pytest.fixture(scope="module")
def edge(
    request: pytest.FixtureRequest,
    sso_edge_kind: str,
    sso_plans: dict[str, tuple[Plan, dict[str, str]]],
    llng: Portal,
    sso_folder: Path,
    sso_pki: LocalCA,
    sso_port: int,
) -> Iterator[Edge]:
    """The edge of kind `sso_edge_kind` in front of the session's portal (a module that defines its own
    `edge` fixture, as every other contract test module does, overrides this one)."""
    folder = sso_folder / f"edge-{request.module.__name__.rsplit('.', 1)[-1]}-{sso_edge_kind}"
    with sso_edge(sso_edge_kind, sso_plans[sso_edge_kind][0], folder, sso_pki, sso_port, llng) as running:
        yield running
