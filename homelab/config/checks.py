"""Rules that need more than one field or the app catalog; each problem is reported at a
key the user actually wrote, as (location, message) for the loader to put a file:line on."""

from __future__ import annotations

import difflib
import functools
from collections.abc import Callable, Iterator
from pathlib import Path

from homelab.config.loaded import Loc
from homelab.config.models import Config
from homelab.config.sso import sso_problems
from homelab.layout import LOCAL_DIR, STACKS_DIR

# Native ZFS properties a dataset can be created with (OpenZFS 2.1, zfsprops(7)); a user property has a ':'
ZFS_PROPERTIES = frozenset(
    [
        "aclinherit",
        "acltype",
        "atime",
        "canmount",
        "casesensitivity",
        "checksum",
        "compression",
        "context",
        "copies",
        "dedup",
        "defcontext",
        "devices",
        "dnodesize",
        "encryption",
        "exec",
        "filesystem_limit",
        "fscontext",
        "keyformat",
        "keylocation",
        "logbias",
        "mlslabel",
        "nbmand",
        "normalization",
        "overlay",
        "pbkdf2iters",
        "primarycache",
        "quota",
        "readonly",
        "recordsize",
        "redundant_metadata",
        "refquota",
        "refreservation",
        "relatime",
        "reservation",
        "rootcontext",
        "secondarycache",
        "setuid",
        "sharenfs",
        "sharesmb",
        "snapdev",
        "snapdir",
        "snapshot_limit",
        "special_small_blocks",
        "sync",
        "utf8only",
        "volmode",
        "vscan",
        "xattr",
        "zoned",
    ]
)


def _host_labels(config: Config) -> list[tuple[Loc, str, str]]:
    """(key, owner, label) of every name the edge serves."""
    from homelab.catalog import app_names

    hosts: list[tuple[Loc, str, str]] = []
    if config.monitoring.enabled:
        hosts.append((("monitoring", "subdomain"), "monitoring", config.monitoring.subdomain))
    for app in app_names():
        settings = getattr(config.apps, app)
        if settings.enabled:
            hosts.append((("apps", app, "subdomain"), app, settings.subdomain or app))
    if config.sso.enabled:
        hosts.append((("sso", "subdomain"), "the sso portal", config.sso.subdomain))
    return hosts


def _sections(config: Config, written: Callable[[Loc], bool]) -> Iterator[tuple[Loc, str]]:
    """Rules across sections; each problem is reported at a key the user actually wrote."""
    from homelab.profiles import available

    if config.server.profile not in available():
        yield (
            ("server", "profile"),
            f"unknown hardware profile {config.server.profile!r} (known: {', '.join(available())})",
        )
    acme = config.domain.acme
    if config.domain.wildcard and acme.challenge != "dns":
        yield (
            ("domain", "wildcard"),
            "wildcard certificates need challenge 'dns' (Let's Encrypt validates them over DNS only)",
        )
    if config.edge.kind == "nginx" and acme.challenge == "tls":
        yield (
            ("domain", "acme", "challenge"),
            "the nginx edge gets certificates with certbot's webroot (http) or its rfc2136 plugin (dns): "
            "use challenge 'http' or 'dns', not 'tls'",
        )
    if config.edge.kind == "nginx" and acme.challenge == "dns" and acme.dns_provider != "rfc2136":
        yield (
            ("domain", "acme", "dns_provider"),
            f"the nginx edge's certbot has the rfc2136 DNS plugin only: use dns_provider 'rfc2136', "
            f"not {acme.dns_provider!r}",
        )

    taken: dict[str, str] = {}
    hosts = _host_labels(config)
    for loc, owner, label in hosts:
        if label in taken:
            yield loc, f"subdomain {label!r} is already used by {taken[label]}"
        taken[label] = owner
    longest = max((label for _, _, label in hosts), key=len, default="")
    if len(f"{longest}.{config.domain.name}") > 253:  # the DNS limit for a whole name; each part fits alone
        yield (
            ("domain", "name"),
            f"the app name {longest}.<domain> would be {len(longest) + 1 + len(config.domain.name)} characters "
            "long, over the DNS limit of 253",
        )

    used: dict[int, str] = {}
    for key, port in config.published_ports():
        if port in used:
            first, second = used[port], key
            if not written(tuple(second.split("."))):
                first, second = second, first
            yield tuple(second.split(".")), f"port {port} is already used by {first}"
        used[port] = key


@functools.cache
def _catalog_names() -> tuple[frozenset[str], frozenset[str]]:
    """Every dataset role ('<owner>/<role>') and every service name any catalog entry has."""
    from homelab.catalog import catalog_dir, entry

    entries = [entry(path.stem) for path in sorted(catalog_dir().glob("*.yaml"))]
    roles = frozenset(f"{e.owner}/{role}" for e in entries for role in e.datasets)
    services = frozenset(name for e in entries for name in e.services)
    return roles, services


def _unknown(name: str, known: frozenset[str], what: str) -> str:
    close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]!r}?)" if close else f" (known: {', '.join(sorted(known))})"
    return f"unknown {what}{hint}"


def _map_keys(config: Config) -> Iterator[tuple[Loc, str]]:
    """Keys of free-form maps and items of name lists must name something the catalog has."""
    roles, services = _catalog_names()
    for key, override in config.storage.datasets.items():
        if key not in roles:
            yield ("storage", "datasets", key), _unknown(key, roles, "dataset role")
        for prop in override.properties:
            if ":" not in prop and prop not in ZFS_PROPERTIES:
                yield ("storage", "datasets", key, "properties", prop), _unknown(prop, ZFS_PROPERTIES, "ZFS property")
    for key in config.images:
        if key not in services:
            yield ("images", key), _unknown(key, services, "service")
    if config.backup and config.backup.datasets:
        for i, role in enumerate(config.backup.datasets):
            if role not in roles:
                yield ("backup", "datasets", i), _unknown(role, roles, "dataset role")


def cross_field_problems(config: Config, written: Callable[[Loc], bool]) -> Iterator[tuple[Loc, str]]:
    yield from _sections(config, written)
    yield from _map_keys(config)
    yield from sso_problems(config.sso)


def folder_problems(config: Config, base_dir: Path) -> Iterator[tuple[Loc, str]]:
    """Data folders inside a folder homelab rewrites (the stacks, local mode's files next to homelab.yaml)
    would be hidden by a mount or removed as obsolete output."""
    outputs = [base_dir / STACKS_DIR, base_dir / LOCAL_DIR]
    folders: list[tuple[Loc, str | None]] = [(("storage", "mountpoint"), config.storage.mountpoint)]
    folders.append((("backup", "state_dir"), config.backup.state_dir if config.backup else None))
    for loc, folder in folders:
        inside = next((o for o in outputs if folder and Path(folder).is_relative_to(o)), None)
        if inside is not None:
            yield loc, f"{folder!r} is inside {inside}, a folder homelab writes its output to"
