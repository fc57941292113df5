"""The first start on a real box (issue 27): each image's start-up operations, as its stand-in performs them
(homelab/images/facts/*.yaml `startup`), under the service as homelab renders it (user, cap_drop/cap_add,
read-only root, tmpfs, no-new-privileges) on the folders homelab prepares.

Real: the Docker Engine, `prepare_host` making the dataset folders, the rendered compose service.
Stand-ins: the apps (tests/docker/standins.py), which do what the image's entrypoint does to its folders.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import yaml
from dockerlab import wait_for
from standins import LABEL, docker

from homelab.config.loader import load
from homelab.host import prepare_host
from homelab.plan import build_plan
from homelab.render.compose import render_stack
from tests.conftest import EXAMPLE

pytestmark = pytest.mark.docker
URL = "http://127.0.0.1:6379/"  # the redis stand-in answers on Redis's port


def _rendered(base: Path, stack: str) -> tuple[object, dict]:
    """The example's plan with its storage under `base`, and one stack's rendered services."""
    data = yaml.safe_load(EXAMPLE.read_text())
    data["storage"] = {**data["storage"], "mountpoint": str(base / "tank")}
    config = base / "homelab.yaml"
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    for name in ("ddns-password", "b2-account", "b2-key"):
        secret = base / "secrets" / name
        secret.parent.mkdir(exist_ok=True)
        secret.write_text("x\n")
        secret.chmod(0o600)
    plan = build_plan(load(config))
    return plan, yaml.safe_load(render_stack(plan, plan.stacks[stack]))["services"]


def run_args(service: dict) -> list[str]:
    """`docker run` options for what the rendered compose service says about the container's privileges."""
    args = ["--label", LABEL]
    if service.get("user"):
        args += ["--user", service["user"]]
    for cap in service.get("cap_drop", []):
        args += ["--cap-drop", cap]
    for cap in service.get("cap_add", []):
        args += ["--cap-add", cap]
    for option in service.get("security_opt", []):
        args += ["--security-opt", option]
    if service.get("read_only"):
        args.append("--read-only")
    for path in service.get("tmpfs", []):
        args += ["--tmpfs", path]
    for volume in service.get("volumes", []):
        args += ["-v", f"{volume['source']}:{volume['target']}{':ro' if volume.get('read_only') else ''}"]
    return args


def _start(image: str, service: dict, *override: str) -> tuple[str, str]:
    """Start `image` as the rendered service (plus `override` options); (container name, its state)."""
    name = f"homelab-test-first-{uuid.uuid4().hex[:8]}"
    command = service.get("command", [])
    docker("run", "-d", "--name", name, *run_args(service), *override, image, *command)

    def settled() -> str | None:
        state = docker("inspect", "-f", "{{.State.Status}} {{.State.ExitCode}}", name).stdout.split()
        if state[0] == "exited":
            return "exited"
        probe = docker("exec", name, "/.standin/busybox", "wget", "-q", "-O", "/dev/null", URL, check=False)
        return "serving" if probe.returncode == 0 else None

    return name, wait_for(settled, 60, f"{image} to serve or exit")


def test_redis_starts_on_the_folder_prepare_host_makes(images, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """On a machine without ZFS, prepare_host makes /data's folder (0750, 999:1000). Started as root with the
    capabilities the catalog used to give it (CHOWN, SETUID, SETGID: no DAC_OVERRIDE, no DAC_READ_SEARCH),
    the entrypoint's `find . ! -user redis -exec chown` cannot read it and `set -e` ends the start (what the
    real image does); started as the service renders it now (user 999:1000), the walk is skipped."""
    plan, services = _rendered(tmp_path, "cloud")
    created = prepare_host(plan, ["cloud"])  # type: ignore[arg-type]
    folder = next(Path(d.path) for d in plan.datasets if d.key == "nextcloud/redis")  # type: ignore[attr-defined]
    assert str(folder) in created and folder.stat().st_uid == 999 and folder.stat().st_mode & 0o7777 == 0o750
    redis = services["redis"]
    as_before = {k: v for k, v in redis.items() if k != "user"} | {"cap_add": ["CHOWN", "SETUID", "SETGID"]}
    names = []
    try:
        name, state = _start(images["redis"], as_before)
        names.append(name)
        assert state == "exited", "started as root without DAC_READ_SEARCH, the walk must fail"
        logs = docker("logs", name).stderr
        assert "Permission denied" in logs and "walk-chown /data" in logs, logs
        name, state = _start(images["redis"], redis)
        names.append(name)
        assert state == "serving", docker("logs", name)
        assert docker("exec", name, "/.standin/busybox", "id", "-u").stdout.strip() == "999"
    finally:
        docker("rm", "-f", *names, check=False)
