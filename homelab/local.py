"""Local mode (`homelab up --local`): the config's apps on `<app>.localhost`, with certificates from an
ACME CA homelab runs itself, so a first run needs no domain, no DNS and nothing reaches Let's Encrypt.

The CA is Pebble (Let's Encrypt's test CA, compose/local-ca.yaml) in the edge stack; Traefik orders from
it as from any ACME directory, and homelab reads its root from Pebble's management API into
`local/local-ca-root.pem` for the user to trust: the edge keeps its one ACME code path, only the
directory changes. Cosmos-Server's local CA (src/utils/certificates.go at v0.22.34: generateCA, loadCA,
saveCA) keeps its root in its config so the user's trust survives restarts, and puts a random id in the
root's name so two installs' roots can be told apart. Pebble holds its root in memory (a new one, with
its own random name, each time it starts), so homelab does the part it can: it compares the root it
reads with the one it wrote last and says when the user must trust a new one.

Everything local mode writes sits in `local/` next to homelab.yaml (stacks, app data, the CA root), so
the real stacks folder and storage are never touched. Local names resolve to this machine without DNS
(RFC 6761 reserves .localhost; browsers and curl map it to loopback).
"""

from __future__ import annotations

import dataclasses
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from pathlib import Path

from homelab.config.loaded import LoadedConfig
from homelab.errors import CommandFailed, EnvironmentProblem
from homelab.layout import LOCAL_DIR, STACKS_DIR
from homelab.plan import build_plan
from homelab.plan_model import Plan
from homelab.render.local_ca import PEBBLE_HTTPS_ROOT
from homelab.runtime.docker import Docker, describe_failure

LOCAL_DOMAIN = "localhost"
CA_ENTRY = "local-ca"  # compose/local-ca.yaml
CA_DIRECTORY = "https://pebble:14000/dir"  # as Traefik reaches it on the proxy network
CA_MANAGEMENT = "https://127.0.0.1:15000"  # as homelab reaches it (published on loopback only)
ROOT_FILE = "local-ca-root.pem"
# Who may reach lan_only routes: this machine, as the edge sees it (loopback, or the gateway of a
# Docker network when the engine's userland proxy forwards the published port; 172.16/12 is Docker's
# default address pool).
LOCAL_LAN = ("127.0.0.0/8", "172.16.0.0/12")


def local_dir(loaded: LoadedConfig) -> Path:
    return loaded.base_dir / LOCAL_DIR


def localize(loaded: LoadedConfig) -> LoadedConfig:
    """The same apps, served locally: local names, the local CA, data under local/data; without what
    needs the outside world or this board's hardware (dynamic DNS, the monitoring stack's BMC and disks,
    Plex's GPU and media folders, dataset names outside the root)."""
    config = loaded.config
    acme = config.domain.acme.model_copy(
        update={
            "ca_server": CA_DIRECTORY,
            "challenge": "tls",
            "staging": False,
            "dns_provider": None,
            "dns_credentials": {},
        }
    )
    lan = [*dict.fromkeys([*LOCAL_LAN, config.edge.proxy_subnet])]
    plex = config.apps.plex.model_copy(update={"transcode_device": None, "media_paths": {}})
    monitoring = config.monitoring.model_copy(update={"enabled": False})
    storage = config.storage.model_copy(update={"mountpoint": str(local_dir(loaded) / "data"), "datasets": {}})
    localized = config.model_copy(
        update={
            "domain": config.domain.model_copy(update={"name": LOCAL_DOMAIN, "acme": acme}),
            "edge": config.edge.model_copy(update={"kind": "traefik", "lan_cidrs": lan}),
            "ddns": config.ddns.model_copy(update={"enabled": False}) if config.ddns else None,
            "storage": storage,
            "apps": config.apps.model_copy(update={"plex": plex}),
            "monitoring": monitoring,
        }
    )
    return dataclasses.replace(loaded, config=localized)


def local_plan(localized: LoadedConfig) -> Plan:
    """The plan of a localized config, with the local CA in the edge stack."""
    return build_plan(localized, extra_entries=(CA_ENTRY,))


def local_out(loaded: LoadedConfig) -> Path:
    return local_dir(loaded) / STACKS_DIR


def pull_missing(plan: Plan, stacks: Iterable[str], docker: Docker, out: Path) -> list[str]:
    """Pull every image the stacks run that the engine lacks; returns what it pulled. Refuses in one
    message naming each image that cannot be pulled and the registry's answer (the stacks stay rendered)."""
    refs = sorted({s.image for name in stacks for s in plan.stacks[name].services.values() if not s.build})
    present = docker.image_ids(refs)
    pulled, failed = [], []
    for ref in refs:
        if ref in present:
            continue
        try:
            docker.pull(ref)
            pulled.append(ref)
        except CommandFailed as exc:
            failed.append(f"  {ref}: {describe_failure(exc)}")
    if failed:
        raise EnvironmentProblem(
            f"cannot pull {len(failed)} image(s) the stacks need; nothing was started "
            f"(the stacks are rendered in {out}):\n" + "\n".join(failed)
        )
    return pulled


def fetch_root(management: str = CA_MANAGEMENT, wait: float = 30.0) -> str:
    """The local CA's root certificate (PEM) from Pebble's management API, waiting up to `wait` seconds
    for Pebble to listen. Pebble's HTTPS is checked against its own test root (render/local_ca.py)."""
    context = ssl.create_default_context(cafile=str(PEBBLE_HTTPS_ROOT))
    deadline = time.monotonic() + wait
    while True:
        try:
            with urllib.request.urlopen(f"{management}/roots/0", context=context, timeout=5) as response:  # noqa: S310
                pem: str = response.read().decode("ascii")
                return pem
        except (urllib.error.URLError, OSError) as exc:
            if time.monotonic() >= deadline:
                raise EnvironmentProblem(f"the local CA did not answer at {management}/roots/0: {exc}") from None
            time.sleep(0.5)


def write_root(loaded: LoadedConfig, pem: str) -> tuple[Path, bool]:
    """Write the CA's root (public) to local/local-ca-root.pem; True when it differs from the last one."""
    path = local_dir(loaded) / ROOT_FILE
    changed = path.is_file() and path.read_text(encoding="ascii", errors="replace") != pem
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{ROOT_FILE}.tmp")
    tmp.write_text(pem, encoding="ascii")
    tmp.chmod(0o644)
    tmp.replace(path)
    return path, changed


def urls(plan: Plan) -> list[str]:
    port = plan.config.edge.https_port
    suffix = "" if port == 443 else f":{port}"
    return [f"https://{route.host}{suffix}/" for route in plan.routes]


def summary(plan: Plan, root: Path, root_changed: bool) -> list[str]:
    """What `up --local` prints last: where the apps are and how to trust the local CA."""
    lines = ["local mode: certificates from the local CA (Pebble); nothing was sent to Let's Encrypt"]
    lines += [f"  {url}" for url in urls(plan)]
    lines += [
        f"local CA root: {root}",
        "  trust it on this machine (Debian): "
        f"sudo cp {root} /usr/local/share/ca-certificates/homelab-local-ca.crt && sudo update-ca-certificates",
        "  in Firefox: Settings > Privacy & Security > Certificates > View Certificates > Authorities > Import",
        f"  or per command: curl --cacert {root} {urls(plan)[0] if plan.routes else 'https://<app>.localhost/'}",
    ]
    if root_changed:
        lines.append(
            "  the local CA has a new root (Pebble makes one each time it starts): trust the new file; "
            "certificates issued before chain to the old one"
        )
    return lines


def finish(loaded: LoadedConfig, plan: Plan, echo: Callable[[str], None]) -> None:
    """After a local `up`: read the CA's root, write it, print the URLs and how to trust it."""
    root, changed = write_root(loaded, fetch_root())
    for line in summary(plan, root, changed):
        echo(line)
