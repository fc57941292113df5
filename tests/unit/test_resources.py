"""Per-service resources: catalog defaults, `apps.<app>.resources` overrides, validation, rendering."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from homelab.catalog import catalog_dir, entry
from homelab.config.loader import load
from homelab.errors import ConfigError
from homelab.images.facts import all_facts
from homelab.plan import build_plan
from homelab.render.compose import render_stack


def _with(config: Path, app: str, resources: dict) -> Path:
    data = yaml.safe_load(config.read_text())
    data["apps"][app] = {**data["apps"].get(app, {}), "resources": resources}
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    return config


def test_every_catalog_service_states_its_budget() -> None:
    for path in sorted(catalog_dir().glob("*.yaml")):
        for name, spec in entry(path.stem).services.items():
            r = spec.resources
            assert r.memory and r.reservation and r.pids and r.cpu_weight, f"{path.stem}/{name}: {r}"


def test_rendered_compose_carries_limits_and_dropped_capabilities(example_config: Path) -> None:
    plan = build_plan(load(example_config))
    dev = yaml.safe_load(render_stack(plan, plan.stacks["dev"]))["services"]
    assert dev["jenkins"]["mem_limit"] == "4g" and dev["jenkins"]["mem_reservation"] == "1g"
    assert dev["jenkins"]["pids_limit"] == 2048 and dev["jenkins"]["cpu_shares"] == 512
    assert dev["gitea"]["cap_drop"] == ["ALL"] and dev["rstudio"]["cap_drop"] == ["ALL"]
    assert dev["rstudio"]["cap_add"] == ["CHOWN", "DAC_OVERRIDE", "FOWNER", "KILL", "SETGID", "SETUID"]
    assert "cpus" not in dev["jenkins"]  # no CPU cap unless asked


def test_override_replaces_only_what_it_sets(example_config: Path) -> None:
    plan = build_plan(load(_with(example_config, "jenkins", {"memory": "8G", "cpus": 2})))
    jenkins = plan.stacks["dev"].services["jenkins"].resources
    assert jenkins is not None
    assert (jenkins.memory, jenkins.reservation, jenkins.pids, jenkins.cpus) == ("8g", "1g", 2048, 2.0)
    assert plan.stacks["dev"].services["gitea"].resources.memory == "1g"  # type: ignore[union-attr]


def test_a_lower_limit_alone_lowers_the_reservation(example_config: Path) -> None:
    plan = build_plan(load(_with(example_config, "jenkins", {"memory": "512m"})))
    jenkins = plan.stacks["dev"].services["jenkins"].resources
    assert jenkins is not None and (jenkins.memory, jenkins.reservation) == ("512m", "512m")


def test_nextcloud_override_leaves_its_db_and_cron_alone(example_config: Path) -> None:
    plan = build_plan(load(_with(example_config, "nextcloud", {"pids": 4096})))
    cloud = plan.stacks["cloud"].services
    assert cloud["nextcloud"].resources.pids == 4096  # type: ignore[union-attr]
    assert cloud["db"].resources.pids == 256 and cloud["cron"].resources.pids == 128  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("resources", "key", "message"),
    [
        ({"memory": "4gb"}, "memory", "is not a size"),
        ({"memory": "-1g"}, "memory", "is not a size"),
        ({"memory": "1k"}, "memory", "out of range"),
        ({"memory": "4096g"}, "memory", "out of range"),
        ({"pids": 3}, "pids", "greater than or equal to 16"),
        ({"cpus": 0}, "cpus", "greater than 0"),
        ({"memory": "1g", "reservation": "2g"}, "", "reservation 2g exceeds memory 1g"),
        ({"memroy": "1g"}, "memroy", ""),
    ],
)
def test_bad_resources_are_refused_with_file_line_and_key(
    example_config: Path, resources: dict, key: str, message: str
) -> None:
    _with(example_config, "jenkins", resources)
    with pytest.raises(ConfigError) as caught:
        load(example_config)
    problem = caught.value.problems[0]
    assert problem.startswith(f"{example_config}:") and problem.split(":")[1].isdigit(), problem
    assert f"apps.jenkins.resources{'.' + key if key else ''}" in problem and message in problem, problem


def test_reservation_above_the_catalog_limit_is_refused(example_config: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        build_plan(load(_with(example_config, "gitea", {"reservation": "2g"})))
    lines = example_config.read_text().splitlines()
    gitea = lines.index("  gitea:")
    line = next(i for i, text in enumerate(lines[gitea:], gitea + 1) if text == "    resources:")
    assert caught.value.problems == [  # found while planning, still at file:line (issue 32)
        f"{example_config}:{line}: apps.gitea.resources: reservation 2g exceeds memory 1g (with the catalog's defaults)"
    ]


def test_capabilities_are_exactly_what_the_images_facts_justify() -> None:
    """Every service whose image's facts list its capabilities drops ALL and adds back exactly those (each
    one sourced in homelab/images/facts/*.yaml); a different entrypoint (Nextcloud's cron) only fewer."""
    facts = all_facts()
    checked = set()
    for path in sorted(catalog_dir().glob("*.yaml")):
        for name, spec in entry(path.stem).services.items():
            image = facts.get(spec.image)
            if image is None or image.capabilities is None:
                assert "ALL" not in spec.cap_drop, f"{path.stem}/{name}: no capability facts to add back from"
                continue
            assert spec.cap_drop == ["ALL"], f"{path.stem}/{name}"
            wanted = set(image.capabilities)
            if spec.entrypoint is None:
                assert sorted(spec.cap_add) == sorted(wanted), f"{path.stem}/{name}"
            else:
                assert set(spec.cap_add) <= wanted, f"{path.stem}/{name}"
            checked.add(name)
    assert {"traefik", "socket-proxy", "nextcloud", "cron", "db", "redis", "gitea", "jenkins", "grafana"} <= checked
    assert {"plex", "graphite", "nginx", "certbot", "rstudio"} <= checked
