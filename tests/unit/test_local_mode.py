"""Local mode (`homelab up --local`, homelab/local.py): the localized plan, the image pull stop, the local
CA's root and what `up --local` prints; in-process with the recording Docker fake (tests/docker/
test_local_mode.py runs it against the engine)."""

from __future__ import annotations

import http.server
import ssl
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from homelab import local as local_mode
from homelab.cli import app
from homelab.config.loader import load
from homelab.engine import compose as apply
from homelab.errors import CommandFailed, EnvironmentProblem, ExitCode
from homelab.plan import build_plan
from homelab.project import render_project
from homelab.render import render_all
from homelab.runtime import docker as docker_module
from homelab.secrets import user_secret_values
from tests.fakes.docker import FakeDocker
from tests.fakes.zfs import FakeZfs

PEBBLE_CERTS = Path(__file__).resolve().parent.parent / "docker" / "images" / "pebble" / "test" / "certs"
ROOT_PEM = "-----BEGIN CERTIFICATE-----\nMIIBroot\n-----END CERTIFICATE-----\n"
REGISTRY_ERROR = 'Error response from daemon: Get "https://registry-1.docker.io/v2/": dial tcp: no such host'


class PullingDocker(FakeDocker):
    """The fake engine, plus `pull`: every image is missing; refs in `unpullable` fail as a registry would."""

    def __init__(self, unpullable: Iterable[str] = ()) -> None:
        super().__init__()
        self.unpullable = set(unpullable)
        self.pulled: list[str] = []

    def pull(self, ref: str, timeout: float = 600) -> None:
        if ref in self.unpullable:
            raise CommandFailed(["docker", "pull", "--quiet", ref], 1, "", REGISTRY_ERROR + "\n")
        self.pulled.append(ref)
        self.local_images[ref] = f"sha256:{len(self.pulled)}"


@pytest.fixture
def localized(example_config: Path):  # type: ignore[no-untyped-def]
    return local_mode.localize(load(example_config))


def test_localized_plan_serves_every_app_on_localhost_from_the_local_ca(localized, example_config: Path) -> None:  # type: ignore[no-untyped-def]
    plan = local_mode.local_plan(localized)
    assert [r.host for r in plan.routes] == [f"{x}.localhost" for x in ("plex", "cloud", "git", "ci", "rstudio")]
    assert list(plan.stacks) == ["edge", "media", "cloud", "dev"]  # no ddclient, no monitoring (BMC, disks)
    edge = plan.stacks["edge"].services
    assert set(edge) == {"traefik", "socket-proxy", "pebble"}
    assert edge["pebble"].ports == ["127.0.0.1:15000:15000"] and edge["pebble"].networks == ["proxy"]
    assert edge["traefik"].environment["LEGO_CA_CERTIFICATES"] == "/etc/homelab/local-ca-https-root.pem"
    assert edge["traefik"].depends_on == ["pebble"]
    assert plan.stacks["media"].services["plex"].devices == []  # no GPU assumed
    base = example_config.parent / "local"
    assert {Path(d.path).parent.parent for d in plan.datasets} == {base / "data"}

    rendering = render_all(plan, {})
    traefik = yaml.safe_load(rendering.files["edge/traefik/traefik.yml"])
    assert traefik["certificatesResolvers"]["le"]["acme"]["caServer"] == "https://pebble:14000/dir"
    assert b"BEGIN CERTIFICATE" in rendering.files["edge/local-ca/pebble-https-root.pem"]
    assert all("letsencrypt.org" not in content.decode() for content in rendering.files.values())


def test_the_config_as_written_has_no_local_ca(example_config: Path) -> None:
    loaded = load(example_config)
    plan = build_plan(loaded)
    assert "pebble" not in plan.stacks["edge"].services
    assert not [p for p in render_all(plan, user_secret_values(loaded)).files if "local-ca" in p]


def test_pull_missing_pulls_what_the_engine_lacks_and_names_each_image_it_cannot_pull(
    localized, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    plan = local_mode.local_plan(localized)
    engine = PullingDocker()
    engine.local_images["traefik:v3.7.15"] = "sha256:present"
    pulled = local_mode.pull_missing(plan, ["edge"], engine, tmp_path)  # type: ignore[arg-type]
    assert pulled == ["letsencrypt/pebble:v2.4.0", "tecnativa/docker-socket-proxy:0.3.0"]

    engine = PullingDocker(unpullable={"letsencrypt/pebble:v2.4.0", "traefik:v3.7.15"})
    with pytest.raises(EnvironmentProblem) as caught:
        local_mode.pull_missing(plan, ["edge"], engine, tmp_path)  # type: ignore[arg-type]
    assert str(caught.value).splitlines() == [
        f"cannot pull 2 image(s) the stacks need; nothing was started (the stacks are rendered in {tmp_path}):",
        f"  letsencrypt/pebble:v2.4.0: {REGISTRY_ERROR}",
        f"  traefik:v3.7.15: {REGISTRY_ERROR}",
    ]
    assert caught.value.exit_code == ExitCode.ENVIRONMENT


@pytest.fixture
def engine(monkeypatch: pytest.MonkeyPatch) -> PullingDocker:
    fake = PullingDocker(unpullable={"traefik:v3.7.15"})
    monkeypatch.setattr(docker_module, "Docker", lambda: fake)
    monkeypatch.setattr(apply, "ZfsCli", FakeZfs)
    monkeypatch.setattr(local_mode, "fetch_root", lambda: ROOT_PEM)
    return fake


def test_up_local_stops_after_rendering_when_an_image_cannot_be_pulled(
    example_config: Path, engine: PullingDocker
) -> None:
    result = CliRunner().invoke(app, ["up", "--local", "-c", str(example_config)])
    rendered = example_config.parent / "local" / "stacks"
    assert result.exit_code == ExitCode.ENVIRONMENT, result.output
    assert f"  traefik:v3.7.15: {REGISTRY_ERROR}" in result.output and str(rendered) in result.output
    assert (rendered / "edge" / "compose.yaml").is_file() and (rendered / "dev" / "compose.yaml").is_file()
    assert engine.changes() == []
    assert not (example_config.parent / "stacks").exists()


def test_up_local_prints_the_urls_and_how_to_trust_the_local_ca(example_config: Path, engine: PullingDocker) -> None:
    engine.unpullable.clear()
    result = CliRunner().invoke(app, ["up", "--local", "-c", str(example_config)])
    assert result.exit_code == 0, result.output
    root = example_config.parent / "local" / "local-ca-root.pem"
    lines = result.output.splitlines()
    tail = lines[
        lines.index("local mode: certificates from the local CA (Pebble); nothing was sent to Let's Encrypt") :
    ]
    assert tail[1:7] == [
        "  https://plex.localhost/",
        "  https://cloud.localhost/",
        "  https://git.localhost/",
        "  https://ci.localhost/",
        "  https://rstudio.localhost/",
        f"local CA root: {root}",
    ]
    assert f"sudo cp {root} /usr/local/share/ca-certificates/homelab-local-ca.crt" in tail[7]
    assert tail[-1] == f"  or per command: curl --cacert {root} https://plex.localhost/"
    assert root.read_text() == ROOT_PEM and root.stat().st_mode & 0o777 == 0o644
    assert ("up", "homelab-edge") in engine.changes()

    down = CliRunner().invoke(app, ["down", "--local", "-c", str(example_config)])
    assert down.exit_code == 0 and down.output.splitlines()[-1] == "down: dev, cloud, media, edge stopped; data kept"


def test_a_new_root_is_written_and_called_out(localized) -> None:  # type: ignore[no-untyped-def]
    path, changed = local_mode.write_root(localized, ROOT_PEM)
    assert not changed and local_mode.write_root(localized, ROOT_PEM) == (path, False)
    assert local_mode.write_root(localized, ROOT_PEM.replace("root", "next")) == (path, True)
    plan = local_mode.local_plan(localized)
    assert "new root" in local_mode.summary(plan, path, True)[-1]
    assert not [line for line in local_mode.summary(plan, path, False) if "new root" in line]


@pytest.fixture
def pebble_management(tmp_path: Path) -> Iterator[str]:
    """An HTTPS server with the certificate the pebble image serves (its test/certs/localhost), answering
    /roots/0 as Pebble's management API does."""

    class Roots(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = ROOT_PEM.encode() if self.path == "/roots/0" else b""
            self.send_response(200 if body else 404)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Roots)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(PEBBLE_CERTS / "localhost" / "cert.pem", PEBBLE_CERTS / "localhost" / "key.pem")
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    yield f"https://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_the_root_is_read_over_https_checked_against_pebbles_own_test_root(pebble_management: str) -> None:
    assert local_mode.fetch_root(pebble_management, wait=5) == ROOT_PEM


def test_a_ca_that_does_not_answer_is_an_environment_problem() -> None:
    with pytest.raises(EnvironmentProblem, match=r"^the local CA did not answer at https://127.0.0.1:9/roots/0"):
        local_mode.fetch_root("https://127.0.0.1:9", wait=0)


def test_render_project_of_the_local_plan_leaves_the_real_stacks_alone(localized, example_config: Path) -> None:  # type: ignore[no-untyped-def]
    out = local_mode.local_out(load(example_config))
    result = render_project(localized, out, plan=local_mode.local_plan(localized))
    assert result.out == example_config.parent / "local" / "stacks"
    assert (out / "edge" / "local-ca" / "pebble-https-root.pem").is_file()
    assert not (example_config.parent / "stacks").exists()
