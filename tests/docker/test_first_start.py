"""The first start on a real box (issue 27): each image's start-up operations, as its stand-in performs them
(homelab/images/facts/*.yaml `startup`), under the service as homelab renders it (user, cap_drop/cap_add,
read-only root, tmpfs, no-new-privileges) on the folders homelab prepares.

Real: the Docker Engine, `prepare_host` making the dataset folders, the rendered compose service.
Stand-ins: the apps (tests/docker/standins.py), which do what the image's entrypoint does to its folders.
"""

from __future__ import annotations

import os
import re
import subprocess
import uuid
from pathlib import Path

import pytest
import yaml
from dockerlab import make_deployment, remove_homelab_resources, wait_for
from standins import LABEL, docker

from homelab import local
from homelab.config.loader import load
from homelab.engine.host import prepare_host
from homelab.plan import build_plan
from homelab.render.compose import render_stack
from tests.conftest import EXAMPLE
from tests.storage.zfs import make_pool, zfs_daemon  # noqa: F401 - fixtures

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


# --- the first-start matrix: every app, each way a real box prepares its data ---------------------------
# (a) plain folders made by prepare_host (`up --local`: local/data), (d) a second `up` after a reboot-like
# restart of every container, (c) data there already and owned by other uids, (b) fresh zfs-fuse datasets
# from `homelab storage apply`. Every service must reach healthy (cron has no healthcheck: running).
APPS = {
    "plex": {"transcode_device": None},
    "nextcloud": {"subdomain": "cloud"},
    "gitea": {"subdomain": "git"},
    "jenkins": {"subdomain": "ci"},
    "rstudio": {},
}


def _states(deployment) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """service -> its health (or its state when it has no healthcheck), for every homelab-* container."""
    return {
        service: c["State"].get("Health", {}).get("Status") or c["State"]["Status"]
        for service, c in deployment.containers().items()
    }


def _all_healthy(deployment, services: set[str]) -> dict[str, str] | None:  # type: ignore[no-untyped-def]
    states = _states(deployment)
    good = set(states) == services and all(s in ("healthy", "running") for s in states.values())
    return states if good else None


@pytest.fixture(scope="module")
def local_box(world, tmp_path_factory):  # type: ignore[no-untyped-def]
    from test_local_mode import _prepare, pebble_image

    env, host_pebble, images = world
    tag = pebble_image(tmp_path_factory.mktemp("pebble-image"))
    deployment = make_deployment(tmp_path_factory.mktemp("first"), (env, host_pebble, {**images, "pebble": tag}), APPS)
    deployment.prepare = lambda: _prepare(deployment)  # type: ignore[attr-defined]
    localized = local.localize(load(deployment.config))
    deployment.local_datasets = local.local_plan(localized).datasets  # type: ignore[attr-defined]
    yield deployment
    remove_homelab_resources()


LOCAL_SERVICES = {"traefik", "socket-proxy", "pebble", "plex", "nextcloud", "cron", "db", "redis", "gitea"}
LOCAL_SERVICES |= {"jenkins", "rstudio"}


def test_a_plain_folders_from_prepare_host(local_box) -> None:  # type: ignore[no-untyped-def]
    local_box.prepare()
    result = local_box.homelab("up", "--local", "--timeout", "120", check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert _all_healthy(local_box, LOCAL_SERVICES), _states(local_box)
    for dataset in local_box.local_datasets:  # plain folders, made by prepare_host, owned by the dataset
        info = Path(dataset.path).stat()
        assert (info.st_uid, info.st_gid) == (dataset.uid, dataset.gid), dataset.key


def test_d_a_second_up_after_every_container_restarted(local_box) -> None:  # type: ignore[no-untyped-def]
    names = [c["Name"].lstrip("/") for c in local_box.containers().values()]
    docker("restart", "-t", "2", *names, timeout=300)
    wait_for(lambda: _all_healthy(local_box, LOCAL_SERVICES), 120, "every service after the restart")
    again = local_box.homelab("up", "--local", "--timeout", "120")
    assert "no changes" in again.stdout, again.stdout
    assert _all_healthy(local_box, LOCAL_SERVICES), _states(local_box)


def test_c_data_owned_by_other_uids_is_refused_before_starting_then_fixed(local_box) -> None:  # type: ignore[no-untyped-def]
    local_box.homelab("down", "--local")
    foreign = [d for d in local_box.local_datasets if d.key in ("nextcloud/redis", "nextcloud/html")]
    for dataset in foreign:  # a restore, or a move from another tool: files and folder of uid 4242
        (Path(dataset.path) / "restored").write_text("x")
        for path in (Path(dataset.path), Path(dataset.path) / "restored"):
            os.chown(path, 4242, 4242)
    refused = local_box.homelab("up", "--local", "--timeout", "120", check=False)
    assert refused.returncode != 0 and "Traceback" not in refused.stderr, refused.stderr
    fixes = re.findall(r"chown -R (\d+:\d+) (\S+)", refused.stderr)
    assert sorted(path for _, path in fixes) == sorted(d.path for d in foreign), refused.stderr
    assert not local_box.containers(), "nothing may start before the owners are right"
    for owner, path in fixes:  # what the message says to run
        subprocess.run(["chown", "-R", owner, path], check=True)
    result = local_box.homelab("up", "--local", "--timeout", "120", check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert _all_healthy(local_box, LOCAL_SERVICES), _states(local_box)
    local_box.homelab("down", "--local")


def test_b_fresh_zfs_datasets_from_storage_apply(world, make_pool, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Not local mode (that keeps its data in plain folders): `homelab storage apply` on a zfs-fuse pool makes
    every dataset (a fresh dataset's root: 0755, chowned by storage apply), then `up` starts every app, and
    ddclient (local mode has no dynamic DNS)."""
    pool = make_pool("512M")
    mount = subprocess.run(
        ["zfs", "get", "-H", "-o", "value", "mountpoint", pool], capture_output=True, text=True, check=True
    ).stdout.strip()
    deployment = make_deployment(tmp_path / "zfs", world, APPS)
    password = deployment.base / "secrets" / "ddns-password"
    password.parent.mkdir()
    password.write_text("not-used\n")
    password.chmod(0o600)
    deployment.data["ddns"] = {"provider": "dyndns2", "server": "127.0.0.1:9", "login": "me"}
    deployment.data["ddns"]["password_file"] = "secrets/ddns-password"
    deployment.data["storage"] = {"pool": pool, "root": f"{pool}/homelab", "mountpoint": f"{mount}/homelab"}
    deployment.write()
    try:
        applied = deployment.homelab("storage", "apply", check=False)
        assert applied.returncode == 0, applied.stdout + applied.stderr
        result = deployment.up("--timeout", "120", check=False)
        assert result.returncode == 0, result.stdout + result.stderr
        services = (LOCAL_SERVICES - {"pebble"}) | {"ddclient"}
        assert _all_healthy(deployment, services), _states(deployment)
    finally:
        remove_homelab_resources()
