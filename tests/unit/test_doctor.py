"""doctor: each check's verdict, with the real probes where the machine has them."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from homelab import doctor
from homelab.config.loader import load
from homelab.engine import host
from homelab.errors import CommandFailed, EnvironmentProblem
from homelab.plan import build_plan
from tests.fakes.docker import FakeDocker
from tests.fakes.zfs import FakeZfs


@pytest.fixture
def plan(example_config: Path, tmp_path: Path):
    storage = tmp_path / "tank"
    text = example_config.read_text().replace("mountpoint: /tank/homelab", f"mountpoint: {storage}")
    text = text.replace("http_port: 80", "http_port: 18080").replace("https_port: 443", "https_port: 18443")
    example_config.write_text(text)
    return build_plan(load(example_config))


def _by_name(checks):
    return {c.name: c for c in checks}


def test_hostnames_that_do_not_resolve_fail(plan) -> None:
    def resolve(host: str) -> None:
        if host.startswith("cloud."):
            raise socket.gaierror(-2, "Name or service not known")

    checks = _by_name(doctor._hostnames(plan, resolve))
    assert checks["cloud.example.com"].level == "fail"
    assert checks["cloud.example.com"].detail == (
        "does not resolve ([Errno -2] Name or service not known); check DNS / ddns settings"
    )
    assert checks["plex.example.com"].level == "ok"


def test_busy_port_fails(plan) -> None:
    with socket.socket() as busy:
        busy.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        busy.bind(("127.0.0.1", 18443))  # a loopback listener blocks the 0.0.0.0 probe too
        busy.listen()
        checks = _by_name(doctor._ports(plan))
    assert checks["port 18443"].level == "fail"
    assert checks["port 18443"].detail == "edge.https_port: already in use by another program"
    assert checks["port 18080"].level == "ok"


def test_acme_json_states(plan) -> None:
    path = host.acme_json_path(plan)
    assert path is not None
    assert next(doctor._acme(plan)).level == "warn"
    path.mkdir(parents=True)  # what Docker does with a missing bind source
    assert next(doctor._acme(plan)).level == "fail"
    path.rmdir()
    path.write_text("{}")
    path.chmod(0o644)
    check = next(doctor._acme(plan))
    assert (check.level, check.detail) == ("fail", f"{path} has mode 0644; Traefik needs 0600")
    path.chmod(0o600)
    assert next(doctor._acme(plan)).level == "ok"


def test_disk_check_reports_free_space(plan) -> None:
    check = next(doctor._disk(plan))
    assert check.name == "disk" and "GiB free" in check.detail


def test_doctor_command_runs_every_check(plan, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(doctor, "_resolve", lambda host: None)
    names = [c.name for c in doctor.run_checks(plan)]
    assert names[:2] == ["docker", "compose"]
    assert {"port 18080", "port 18443", "cloud.example.com", "acme.json", "disk"} <= set(names)


def _zfs_with(*names: str) -> FakeZfs:
    zfs = FakeZfs()
    for name in names:
        if "/" in name:
            zfs.create(name)
        else:
            zfs.add_pool(name)
    return zfs


def test_engine_and_compose_reported_from_the_driver(plan) -> None:
    docker = FakeDocker()
    assert [(c.level, c.name, c.detail) for c in doctor._docker(docker)] == [
        ("ok", "docker", "engine 27.3.1 reachable"),
        ("ok", "compose", "docker compose 2.30.3"),
    ]
    docker.version = None
    docker.compose = EnvironmentProblem("Docker Compose v2 not found: install the docker compose plugin")
    assert [(c.level, c.detail) for c in doctor._docker(docker)] == [
        ("fail", "engine not reachable: Cannot connect to the Docker daemon"),
        ("fail", "Docker Compose v2 not found: install the docker compose plugin"),
    ]


def test_zfs_missing_is_a_warning(plan) -> None:
    zfs = FakeZfs()
    zfs.installed = False
    assert [(c.level, c.name, c.detail) for c in doctor._zfs(plan, zfs)] == [
        ("warn", "zfs", "zfs command not found: datasets cannot be checked or created")
    ]


def test_zfs_that_cannot_list_fails(plan) -> None:
    zfs = FakeZfs()
    zfs.fail["names"] = CommandFailed(["zfs", "list"], 1, "", "internal error: failed to initialize ZFS library\n")
    assert [(c.level, c.detail) for c in doctor._zfs(plan, zfs)] == [
        ("fail", "zfs list failed: internal error: failed to initialize ZFS library")
    ]


def test_pool_and_datasets(plan) -> None:
    checks = _by_name(doctor._zfs(plan, _zfs_with("data")))
    assert (checks["pool tank"].level, checks["pool tank"].detail) == ("fail", "missing")
    assert checks["datasets"].level == "warn"
    assert checks["datasets"].detail.startswith("14 missing (created by storage apply): tank/homelab/edge/acme, ")
    names = ["tank", "tank/homelab", *sorted({"/".join(d.name.split("/")[:3]) for d in plan.datasets})]
    checks = _by_name(doctor._zfs(plan, _zfs_with(*names, *(d.name for d in plan.datasets))))
    assert (checks["pool tank"].level, checks["pool tank"].detail) == ("ok", "present")
    assert (checks["datasets"].level, checks["datasets"].detail) == ("ok", "all 14 present")


def test_run_checks_on_the_fakes(plan, monkeypatch: pytest.MonkeyPatch) -> None:
    checks = doctor.run_checks(plan, lambda host: None, docker=FakeDocker(), zfs=_zfs_with("tank"))
    assert [c.name for c in checks][:2] == ["docker", "compose"]
    assert _by_name(checks)["pool tank"].level == "ok"


def test_a_symlinked_acme_json_is_not_a_regular_file(plan, tmp_path: Path) -> None:
    path = host.acme_json_path(plan)
    assert path is not None
    path.parent.mkdir(parents=True)
    (tmp_path / "elsewhere.json").write_text("{}")
    path.symlink_to(tmp_path / "elsewhere.json")
    check = next(doctor._acme(plan))
    assert (check.level, check.detail) == (
        "fail",
        f"{path} is not a regular file (a missing bind source became a folder?)",
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="chowns folders to other uids")
def test_a_dataset_folder_owned_by_another_uid_fails_and_up_refuses_before_starting(plan) -> None:
    """Data restored or moved from another tool (case (c) of the first-start matrix): doctor names the folder,
    its owner and the chown; prepare_host (what `up` runs before any stack) refuses the same, creating nothing."""
    redis = next(d for d in plan.datasets if d.key == "nextcloud/redis")
    Path(redis.path).mkdir(parents=True)
    os.chown(redis.path, 4242, 4242)
    checks = _by_name(doctor._owners(plan))
    check = checks["owner nextcloud/redis"]
    assert check.level == "fail" and f"{redis.path} is owned by 4242:4242" in check.detail
    assert f"chown -R 999:1000 {redis.path}" in check.detail
    with pytest.raises(host.HostError, match="4242:4242"):
        host.prepare_host(plan, ["cloud"])
    db = next(d for d in plan.datasets if d.key == "nextcloud/db")
    assert not Path(db.path).exists()  # nothing created
    os.chown(redis.path, 999, 1000)
    assert host.prepare_host(plan, ["cloud"]) and Path(db.path).stat().st_uid == 70
    assert _by_name(doctor._owners(plan))["dataset owners"].level == "ok"


def test_not_root_up_refuses_the_folders_it_cannot_give_their_owner(plan, monkeypatch: pytest.MonkeyPatch) -> None:
    """homelab run by uid 1000: a new dataset folder would be 1000's, and Redis (999:1000) could not even enter
    it; prepare_host says so before creating anything."""
    monkeypatch.setattr(host.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(host.os, "getegid", lambda: 1000)
    with pytest.raises(host.HostError) as caught:
        host.prepare_host(plan, ["cloud"])
    redis = next(d for d in plan.datasets if d.key == "nextcloud/redis")
    assert f"{redis.path} would be owned by 1000:1000, not 999:1000 (nextcloud/redis): run as root" in str(caught.value)
    assert not Path(redis.path).exists()
