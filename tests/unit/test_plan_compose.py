"""compose.yaml from a Plan: which keys appear, and what an empty value means to compose."""

from __future__ import annotations

from pathlib import Path

import yaml

from homelab.config.loader import load
from homelab.plan import build_plan
from homelab.render.compose import render_stack


def test_empty_entrypoint_is_kept_other_empty_keys_are_dropped(example_config: Path) -> None:
    plan = build_plan(load(example_config))
    stack = plan.stacks["dev"]
    rstudio = stack.services["rstudio"]
    rstudio.entrypoint, rstudio.command = [], None  # [] clears the image's entrypoint: it must reach compose
    rstudio.cap_add = []  # an empty list is dropped (the catalog adds rstudio's six back)
    rstudio.environment["PASSWORD_HINT"] = "costs $5"
    service = yaml.safe_load(render_stack(plan, stack))["services"]["rstudio"]
    assert service["entrypoint"] == []
    assert "command" not in service
    assert service["environment"]["PASSWORD_HINT"] == "costs $$5"
    for absent in ("ports", "devices", "tmpfs", "cap_add", "depends_on", "build", "network_mode"):
        assert absent not in service, absent
    assert service["networks"] == ["default", "proxy"]


def test_dependencies_wait_for_health_when_they_have_a_check(example_config: Path) -> None:
    plan = build_plan(load(example_config))
    document = yaml.safe_load(render_stack(plan, plan.stacks["cloud"]))
    assert document["name"] == "homelab-cloud"
    assert document["services"]["nextcloud"]["depends_on"] == {
        "db": {"condition": "service_healthy", "restart": True},
        "redis": {"condition": "service_healthy", "restart": True},
    }
    assert document["secrets"]["nextcloud_db_password"] == {"file": "../secrets/nextcloud_db_password"}
    collectd = yaml.safe_load(render_stack(plan, plan.stacks["monitoring"]))["services"]["collectd"]
    assert collectd["network_mode"] == "host" and "networks" not in collectd
