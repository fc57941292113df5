"""Fixtures for the monitoring stack: the example's plan, catalog and rendering."""

from __future__ import annotations

from pathlib import Path

import pytest

from homelab.config.loader import load
from homelab.monitoring.catalog_builder import catalog_for
from homelab.monitoring.series import Catalog
from homelab.plan import build_plan
from homelab.plan_model import Plan
from homelab.render import Rendering, render_all


@pytest.fixture
def example_plan(example_config: Path) -> Plan:
    return build_plan(load(example_config))


@pytest.fixture
def example_catalog(example_plan: Plan) -> Catalog:
    return catalog_for(example_plan)


@pytest.fixture
def example_rendering(example_plan: Plan) -> Rendering:
    return render_all(example_plan, {"secrets/ddns-password": "x", "secrets/b2-account": "x", "secrets/b2-key": "x"})
