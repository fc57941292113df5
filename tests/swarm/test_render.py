"""engine: swarm renders stack files (homelab/render/swarm_stack.py): goldens for the example, and the rules."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from homelab.config.loader import load
from homelab.project import render_project
from tests.conftest import REPO

GOLDEN = REPO / "tests" / "golden" / "swarm"


def swarm_config(example_dir: Path, **extra: str) -> Path:
    """The bundled example with `engine: swarm` (and any other top-level lines)."""
    config = example_dir / "homelab.yaml"
    text = config.read_text().replace("version: 1\n", "version: 1\nengine: swarm\n", 1)
    config.write_text(text + "".join(f"{key}: {value}\n" for key, value in extra.items()))
    return config


def rendered(config: Path, tmp_path: Path) -> dict[str, bytes]:
    return render_project(load(config), tmp_path / "stacks", dry_run=True).rendering.files


def swarm_files(files: dict[str, bytes]) -> dict[str, bytes]:
    """What engine: swarm changes: the stack files and Traefik's static config."""
    return {p: c for p, c in files.items() if p.endswith("/stack.yaml") or p == "edge/traefik/traefik.yml"}


def test_example_stack_files_match_golden_files(
    example_dir: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    expected = {GOLDEN / rel: c for rel, c in swarm_files(rendered(swarm_config(example_dir), tmp_path)).items()}
    if request.config.getoption("--update-golden"):
        shutil.rmtree(GOLDEN, ignore_errors=True)
        for path, content in expected.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)
    committed = {p: p.read_bytes() for p in GOLDEN.rglob("*") if p.is_file()}
    stale = sorted(
        str(p.relative_to(REPO)) for p in expected.keys() | committed.keys() if expected.get(p) != committed.get(p)
    )
    assert not stale, f"swarm golden files out of date (run pytest --update-golden): {stale}"


def test_compose_is_the_default_engine(example_config: Path, tmp_path: Path) -> None:
    files = rendered(example_config, tmp_path)
    assert "edge/compose.yaml" in files and not any(p.endswith("stack.yaml") for p in files)


def _stacks(files: dict[str, bytes]) -> dict[str, dict]:
    return {p.split("/")[0]: yaml.safe_load(c) for p, c in files.items() if p.endswith("/stack.yaml")}


def test_placement_update_order_and_edge_ports(example_dir: Path, tmp_path: Path) -> None:
    files = rendered(swarm_config(example_dir), tmp_path)
    stacks = _stacks(files)
    assert not any(p.endswith("compose.yaml") for p in files)
    traefik = stacks["edge"]["services"]["traefik"]
    assert traefik["deploy"]["placement"]["constraints"] == ["node.labels.homelab.edge == true"]
    assert {(p["published"], p["mode"]) for p in traefik["ports"]} >= {(80, "host"), (443, "host")}
    db = stacks["cloud"]["services"]["db"]["deploy"]
    assert db["placement"]["constraints"] == ["node.labels.homelab.storage == true"]
    assert db["update_config"] == {
        "parallelism": 1,
        "order": "stop-first",
        "failure_action": "rollback",
        "monitor": "10s",
    }
    assert db["resources"]["limits"]["memory"] == "1g"
    ddclient = stacks["edge"]["services"]["ddclient"]["deploy"]
    assert "placement" not in ddclient and ddclient["update_config"]["order"] == "start-first"
    assert stacks["edge"]["services"]["socket-proxy"]["deploy"]["placement"]["constraints"] == ["node.role == manager"]
    for stack in stacks.values():
        for service in stack["services"].values():
            assert not {"build", "devices", "security_opt", "restart", "labels", "depends_on"} & service.keys()
            assert service["deploy"]["restart_policy"]["condition"] == "any"


def test_routes_are_service_labels_on_the_swarm_provider(example_dir: Path, tmp_path: Path) -> None:
    files = rendered(swarm_config(example_dir), tmp_path)
    labels = _stacks(files)["cloud"]["services"]["nextcloud"]["deploy"]["labels"]
    assert labels["traefik.swarm.network"] == "homelab-proxy" and "traefik.docker.network" not in labels
    static = yaml.safe_load(files["edge/traefik/traefik.yml"])
    assert set(static["providers"]) == {"swarm", "file"}
    assert static["providers"]["swarm"]["exposedByDefault"] is False


def test_configs_and_secrets_are_named_by_content(example_dir: Path, tmp_path: Path) -> None:
    config = swarm_config(example_dir)
    edge = _stacks(rendered(config, tmp_path / "a"))["edge"]
    assert edge["secrets"]["edge_ddclient_conf"]["name"].startswith("edge_ddclient_conf-${HOMELAB_DIGEST_")
    before = {c["file"]: name for name, c in edge["configs"].items()}
    text = config.read_text().replace("  lan_cidrs: [192.168.1.0/24]", "  lan_cidrs: [192.168.2.0/24]")
    config.write_text(text)
    after = {c["file"]: name for name, c in _stacks(rendered(config, tmp_path / "b"))["edge"]["configs"].items()}
    assert before["./traefik/dynamic.yml"] != after["./traefik/dynamic.yml"]  # lan_cidrs live in dynamic.yml
    assert before["./traefik/traefik.yml"] == after["./traefik/traefik.yml"]


def test_encrypted_overlay_on_request(example_dir: Path, tmp_path: Path) -> None:
    plain = _stacks(rendered(swarm_config(example_dir), tmp_path / "a"))["edge"]["networks"]["proxy"]
    assert plain["driver"] == "overlay" and plain["attachable"] is True and "driver_opts" not in plain
    config = example_dir / "homelab.yaml"
    config.write_text(config.read_text().replace("edge:\n", "edge:\n  encrypt_overlay: true\n", 1))
    proxy = _stacks(rendered(config, tmp_path / "b"))["edge"]["networks"]["proxy"]
    assert proxy["driver_opts"] == {"encrypted": "true"}
