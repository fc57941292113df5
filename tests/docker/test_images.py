"""Faithful stand-ins (generated from homelab/images/facts/) against the catalog, and `homelab images check`.

- RStudio: the old all-programs stand-in passes the old curl healthcheck; the faithful one (the real
  image has no curl) fails it and passes the catalog's.
- Postgres: during the entrypoint's init server (unix socket only) a socket probe passes; the catalog's
  TCP probe waits for the real server.
- The socket proxy, started with the catalog's environment, listens on IPv4 only.
- `homelab images check` passes on the stand-ins and names what a deliberately wrong one lacks, and names
  the image and the registry error when a pull fails.
- The stand-ins' /etc/passwd comes from the facts' named users: the real engine's `id rstudio` finds rstudio
  at 1000:1000 in the faithful one, and `images check` fails a stand-in of rocker/rstudio:4.4.2 as pulled
  before 2024-11-14 (rstudio at 1001:1001), naming the user.
"""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import pytest
import standins
from dockerlab import free_port, make_deployment, wait_for
from standins import docker

from homelab.catalog import entry
from homelab.images.facts import all_facts

pytestmark = pytest.mark.docker

# the catalog's RStudio healthcheck before issue 11 (compose/rstudio.yaml at bd487cb)
OLD_RSTUDIO_HEALTHCHECK = ["curl", "-fsS", "-o", "/dev/null", "http://localhost:8787/"]
# the catalog's Postgres healthcheck before issue 11: over the unix socket
OLD_DB_HEALTHCHECK = ["pg_isready", "-U", "nextcloud", "-d", "nextcloud"]


def _start(image: str, *args: str) -> str:
    name = f"homelab-test-{uuid.uuid4().hex[:8]}"
    docker("run", "-d", "--name", name, "--label", standins.LABEL, *args, image)
    return name


def _exec(name: str, argv: list[str]) -> subprocess.CompletedProcess[str]:
    return docker("exec", name, *argv, check=False, timeout=60)


def _catalog_test(app: str, service: str) -> list[str]:
    healthcheck = entry(app).services[service].healthcheck
    assert healthcheck is not None and healthcheck.test[0] == "CMD"
    return healthcheck.test[1:]


def test_faithful_rstudio_standin_fails_the_old_curl_healthcheck(images) -> None:  # type: ignore[no-untyped-def]
    legacy = _start(images[standins.LEGACY], "-e", "STANDIN_NAME=rstudio", "-e", "STANDIN_PORT=8787")
    faithful = _start(images["rstudio"])
    try:
        current = _catalog_test("rstudio", "rstudio")
        wait_for(lambda: _exec(faithful, current).returncode == 0, 60, "the catalog's healthcheck in the stand-in")
        wait_for(lambda: _exec(legacy, OLD_RSTUDIO_HEALTHCHECK).returncode == 0, 60, "the old stand-in")
        old = _exec(faithful, OLD_RSTUDIO_HEALTHCHECK)
        assert old.returncode != 0 and "curl" in old.stdout + old.stderr, old
        # answers only the real health path: a path another app serves is a 404
        other = _exec(faithful, ["wget", "-q", "-O", "/dev/null", "http://127.0.0.1:8787/api/healthz"])
        assert other.returncode != 0
    finally:
        docker("rm", "-f", legacy, faithful, check=False)


def test_postgres_tcp_probe_waits_for_the_real_server(images, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    data = tmp_path / "pgdata"
    data.mkdir()
    (data / "HOLD").write_text("init server running\n")  # the stand-in's init phase lasts while this exists
    db = _start(images["db"], "-v", f"{data}:/var/lib/postgresql/data")
    try:
        wait_for(lambda: _exec(db, OLD_DB_HEALTHCHECK).returncode == 0, 60, "the init server's unix socket")
        current = _catalog_test("nextcloud", "db")
        during = _exec(db, current)
        assert during.returncode != 0, f"the catalog's probe passed during init: {during}"
        (data / "HOLD").unlink()
        wait_for(lambda: _exec(db, current).returncode == 0, 60, "postgres on TCP after init")
    finally:
        docker("rm", "-f", db, check=False)


def _listening(container: str, table: str, port: int) -> bool:
    rows = _exec(container, ["cat", f"/proc/net/{table}"]).stdout.splitlines()[1:]
    return any(r.split()[1].endswith(f":{port:04X}") and r.split()[3] == "0A" for r in rows)


def test_socket_proxy_with_the_catalog_environment_binds_ipv4_only(images) -> None:  # type: ignore[no-untyped-def]
    env = entry("edge-traefik").services["socket-proxy"].environment
    args = [arg for key, value in env.items() for arg in ("-e", f"{key}={value}")]
    proxy = _start(images["socket-proxy"], *args, "-v", "/var/run/docker.sock:/var/run/docker.sock")
    try:
        wait_for(
            lambda: _exec(proxy, ["wget", "-q", "-O", "/dev/null", "http://127.0.0.1:2375/version"]).returncode == 0,
            60,
            "the socket proxy",
        )
        assert _listening(proxy, "tcp", 2375)
        assert not _listening(proxy, "tcp6", 2375), "tecnativa 0.3.0 binds [::]:2375 unless DISABLE_IPV6"
    finally:
        docker("rm", "-f", proxy, check=False)


@pytest.fixture(scope="module")
def deployment(world, tmp_path_factory):  # type: ignore[no-untyped-def]
    apps = {
        "plex": {"transcode_device": None},
        "nextcloud": {},
        "gitea": {"ssh_port": free_port()},
        "jenkins": {},
        "rstudio": {},
    }
    return make_deployment(tmp_path_factory.mktemp("images-check"), world, apps)


def test_images_check_passes_on_the_faithful_standins(deployment) -> None:  # type: ignore[no-untyped-def]
    result = deployment.homelab("images", "check", timeout=600)
    assert "all 9 images match their facts" in result.stdout, result.stdout
    assert "homelab-test/rstudio:run  (rstudio: rstudio)" in result.stdout
    assert "ok    absent curl" in result.stdout
    assert "ok    user rstudio                     expected 1000:1000 found 1000:1000" in result.stdout


def test_images_check_catches_a_wrong_standin_and_a_failed_pull(deployment, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    wrong = standins.faithful_image(tmp_path, all_facts()["rocker/rstudio:4.4.2"], drop=("wget",), tag="wrong")
    unreachable = f"127.0.0.1:{free_port()}/homelab-test/plex:missing"  # a registry that refuses the connection
    deployment.data["images"] = {**deployment.data["images"], "rstudio": wrong, "plex": unreachable}
    deployment.write()
    result = deployment.homelab("images", "check", check=False, timeout=600)
    out = result.stdout
    assert result.returncode == 1, out + result.stderr
    assert f"{wrong}  (rstudio: rstudio)" in out
    assert "FAIL  program wget" in out and "found missing" in out
    assert f"FAIL  pull {unreachable} failed: " in out and "connection refused" in out.lower(), out
    assert (
        f"2 of 9 images failed: {unreachable}, {wrong}" in out or f"2 of 9 images failed: {wrong}, {unreachable}" in out
    )


def test_images_check_fails_an_rstudio_with_the_old_uid(deployment, world, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """rocker/rstudio:4.4.2 built before rocker-versioned2 99aa645 (2024-11-14): ubuntu:noble's `ubuntu` holds
    1000, rstudio is 1001:1001, and init_userconf.sh keeps it for USERID=1000."""
    facts = all_facts()["rocker/rstudio:4.4.2"]
    old = standins.faithful_image(tmp_path, facts, users={"rstudio": "1001:1001"}, tag="olduid")
    ids = docker("run", "--rm", "--entrypoint", "/bin/sh", old, "-c", "id -u rstudio; id -g rstudio").stdout
    assert ids.split() == ["1001", "1001"], ids
    before = deployment.data["images"]
    deployment.data["images"] = {**world[2], "rstudio": old}  # every other image the faithful stand-in
    deployment.write()
    try:
        result = deployment.homelab("images", "check", check=False, timeout=600)
    finally:
        deployment.data["images"] = before
        deployment.write()
    out = result.stdout
    assert result.returncode == 1, out + result.stderr
    assert f"{old}  (rstudio: rstudio)" in out
    assert "FAIL  user rstudio                     expected 1000:1000 found 1001:1001" in out, out
    assert f"1 of 9 images failed: {old}" in out, out
