"""The recovery bundle: what brings a server back besides its datasets, written last in every successful run.

`bundles/<run>.tar` on each remote, encrypted by the crypt like the datasets: homelab.yaml and every file it
names (secret files, the sensor inventory), the stacks' compose.override.yaml files, the secrets homelab
generated (the stacks' secrets folder), the edge's certificate store, the images each service runs (and
their local IDs), homelab's version, the datasets with their properties, and a `pg_dump` of each running
Postgres server taken during the run (what a different Postgres minor can start from; the snapshot stays
the primary copy). The crypt password and salt are never in it: their files are left out, and so is any
file that holds either value (a copy of them would open every backup to whoever reads one bundle).

Each member is listed, with its sha256 and size, in `manifest.json`, the tar's LAST member: a bundle cut
short lacks it, or has a member whose checksum differs, and is refused (homelab.backup.recover). A bundle
is written only after every dataset of the run succeeded, so the newest bundle always matches a complete run.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from homelab import __version__
from homelab.backup import databases
from homelab.backup.context import BackupError, Context
from homelab.backup.records import Record
from homelab.backup.sentinel import Sentinel
from homelab.certs.store import store_path
from homelab.config.loaded import secret_refs
from homelab.errors import CommandFailed
from homelab.layout import SECRETS_DIR, STACKS_DIR
from homelab.plan import build_plan
from homelab.plan_model import Plan
from homelab.runtime.docker import Engine

FOLDER = "bundles"
SUFFIX = ".tar"
MANIFEST = "manifest.json"
OVERRIDE_FILE = "compose.override.yaml"
Kind = Literal["config", "named", "override", "secret", "certificates", "dump"]


class Member(BaseModel):
    """One file of the bundle: where it goes back (relative to the config folder, or the certificate store
    or dump it is), its mode and checksum."""

    model_config = ConfigDict(extra="forbid")
    kind: Kind
    path: str  # the member's name in the tar
    restore_to: str  # config folder relative path; for certificates: relative to the store; for dumps: ""
    mode: int
    size: int
    sha256: str


class DatasetInfo(BaseModel):
    model_config = ConfigDict(extra="forbid")
    key: str
    name: str
    path: str
    properties: dict[str, str]
    uid: int
    gid: int
    backed_up: bool  # by this backup (the catalog's `backup`, or backup.datasets): recover restores it


class DumpInfo(BaseModel):
    model_config = ConfigDict(extra="forbid")
    stack: str
    service: str
    dataset: str  # <app>/<role> of its PGDATA
    member: str


class Manifest(Record):
    run: str
    created: datetime
    homelab_version: str
    hostname: str
    config_name: str  # homelab.yaml's file name
    members: list[Member] = Field(default_factory=list)
    datasets: list[DatasetInfo] = Field(default_factory=list)
    images: dict[str, str] = Field(default_factory=dict)  # stack/service -> image reference
    image_ids: dict[str, str] = Field(default_factory=dict)  # image reference -> local image ID
    dumps: list[DumpInfo] = Field(default_factory=list)
    sentinels: list[Sentinel] = Field(default_factory=list)  # written before this run's snapshots
    notes: list[str] = Field(default_factory=list)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class _Builder:
    def __init__(self, manifest: Manifest, forbidden: list[bytes]) -> None:
        self.manifest, self.forbidden = manifest, [f for f in forbidden if f]
        self.files: dict[str, bytes] = {}

    def add(self, kind: Kind, path: str, restore_to: str, data: bytes, mode: int) -> None:
        if any(f in data for f in self.forbidden):
            self.manifest.notes.append(f"{path}: left out, it holds the crypt password or salt")
            return
        self.files[path] = data
        self.manifest.members.append(
            Member(kind=kind, path=path, restore_to=restore_to, mode=mode & 0o7777, size=len(data), sha256=sha256(data))
        )

    def add_file(self, kind: Kind, path: str, restore_to: str, source: Path) -> None:
        self.add(kind, path, restore_to, source.read_bytes(), source.stat().st_mode)

    def tar(self) -> bytes:
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            for name, data in [*self.files.items(), (MANIFEST, self.manifest.model_dump_json(indent=1).encode())]:
                info = tarfile.TarInfo(name)
                info.size, info.mode = len(data), 0o600
                tar.addfile(info, io.BytesIO(data))
        return buffer.getvalue()


def _config_files(ctx: Context, builder: _Builder, crypt_files: set[Path]) -> None:
    loaded = ctx.loaded
    builder.add_file("config", f"config/{loaded.path.name}", loaded.path.name, loaded.path)
    named = sorted({relative for _, relative in secret_refs(loaded.config)})
    inventory = loaded.config.monitoring.inventory if loaded.config.monitoring else None
    for relative in [*named, *([inventory] if inventory else [])]:
        source = loaded.secret_path(relative)
        if source in crypt_files or not source.is_file():
            continue
        builder.add_file("named", f"config/{relative}", relative, source)


def _stacks_files(ctx: Context, builder: _Builder) -> None:
    """The stacks' own overrides and the secrets homelab generated (the rest of the stacks folder is
    rendered again from homelab.yaml)."""
    stacks = ctx.loaded.base_dir / STACKS_DIR
    for override in sorted(stacks.glob(f"*/{OVERRIDE_FILE}")):
        relative = str(override.relative_to(ctx.loaded.base_dir))
        builder.add_file("override", f"config/{relative}", relative, override)
    secrets = stacks / SECRETS_DIR
    for secret in sorted(secrets.iterdir()) if secrets.is_dir() else []:
        if secret.is_file():
            relative = str(secret.relative_to(ctx.loaded.base_dir))
            builder.add_file("secret", f"config/{relative}", relative, secret)


def _certificates(plan: Plan, builder: _Builder) -> None:
    store = store_path(plan)
    if store is None or not store.exists():
        return
    files = [store] if store.is_file() else sorted(p for p in store.rglob("*") if p.is_file() and not p.is_symlink())
    for path in files:
        relative = path.name if store.is_file() else str(path.relative_to(store))
        builder.add_file("certificates", f"certificates/{relative}", relative, path)


def _dumps(ctx: Context, plan: Plan, builder: _Builder, engine: Engine | None, scratch: Path) -> None:
    """A pg_dump of every running Postgres server; a stopped one's files are consistent in the snapshot."""
    by_path = {d.path: d.key for d in plan.datasets}
    for server in databases.servers(plan, ctx.loaded.base_dir):
        name = f"{server.stack}/{server.dump.service}"
        if engine is None or not databases.running(engine, server):
            builder.manifest.notes.append(f"{name}: not running, no dump")
            continue
        dest = scratch / f"{server.stack}-{server.dump.service}.sql"
        try:
            databases.dump_to(engine, server, dest)
        except (CommandFailed, OSError, TimeoutError) as exc:
            raise BackupError(f"bundle: pg_dump of {name} failed: {exc}") from None
        member = f"dumps/{server.stack}-{server.dump.service}.sql"
        builder.add_file("dump", member, "", dest)
        builder.manifest.dumps.append(
            DumpInfo(
                stack=server.stack,
                service=server.dump.service,
                dataset=by_path.get(server.dump.folder, ""),
                member=member,
            )
        )


def build(
    ctx: Context, run_id: str, engine: Engine | None, secrets: tuple[str, str], sentinels: list[Sentinel] | None = None
) -> bytes:
    """The bundle of this run, as tar bytes (small: configuration, certificates and dumps)."""
    loaded = ctx.loaded
    plan = build_plan(loaded)
    manifest = Manifest(
        run=run_id,
        created=ctx.clock(),
        homelab_version=__version__,
        hostname=loaded.config.server.hostname,
        config_name=loaded.path.name,
        sentinels=sentinels or [],
    )
    builder = _Builder(manifest, [s.encode() for s in secrets])
    backup = ctx.backup
    crypt_files = {
        loaded.secret_path(named or generated)
        for named, generated in (
            (backup.crypt_password_file, "secrets/backup-crypt-password"),
            (backup.crypt_salt_file, "secrets/backup-crypt-salt"),
        )
    }
    _config_files(ctx, builder, crypt_files)
    _stacks_files(ctx, builder)
    _certificates(plan, builder)
    backed_up = {d.key for d in ctx.datasets}
    manifest.datasets = [
        DatasetInfo(
            key=d.key,
            name=d.name,
            path=d.path,
            properties=dict(d.properties),
            uid=d.uid,
            gid=d.gid,
            backed_up=d.key in backed_up,
        )
        for d in plan.datasets
    ]
    manifest.images = {f"{s.name}/{name}": svc.image for s in plan.stacks.values() for name, svc in s.services.items()}
    if engine is not None:
        manifest.image_ids = engine.image_ids(set(manifest.images.values()))
    with tempfile.TemporaryDirectory(prefix="bundle-", dir=ctx.state.scratch) as scratch:
        _dumps(ctx, plan, builder, engine, Path(scratch))
        return builder.tar()


def upload(ctx: Context, run_id: str, data: bytes) -> str:
    """The bundle onto every remote of the run (through the crypt); its name there."""
    name = f"{FOLDER}/{run_id}{SUFFIX}"
    with tempfile.TemporaryDirectory(prefix="bundle-", dir=ctx.state.scratch) as scratch:
        local = Path(scratch) / f"{run_id}{SUFFIX}"
        local.write_bytes(data)
        local.chmod(0o600)
        for remote in ctx.remotes:
            ctx.rclone.copyto(str(local), ctx.remote_path(remote, name))
    return name


class Bundle:
    """A bundle read back and checked: its manifest and members."""

    def __init__(self, manifest: Manifest, files: dict[str, bytes]) -> None:
        self.manifest, self.files = manifest, files

    def member(self, path: str) -> bytes:
        return self.files[path]


def read(data: bytes, name: str) -> Bundle:
    """Parse and check a bundle: BackupError naming what is wrong when it is cut short or damaged."""
    files: dict[str, bytes] = {}
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
            for info in tar:
                extracted = tar.extractfile(info) if info.isfile() else None
                if extracted is not None:
                    files[info.name] = extracted.read()
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise BackupError(f"bundle {name} is truncated or damaged: {exc}") from None
    if MANIFEST not in files:
        raise BackupError(f"bundle {name} is truncated: its manifest (the last member) is missing")
    try:
        manifest = Manifest.model_validate(json.loads(files[MANIFEST]))
    except (ValueError, ValidationError) as exc:
        raise BackupError(f"bundle {name}: the manifest does not parse: {exc}") from None
    for m in manifest.members:
        data_of = files.get(m.path)
        if data_of is None or len(data_of) != m.size or sha256(data_of) != m.sha256:
            raise BackupError(f"bundle {name} is damaged: {m.path} does not match its checksum")
    return Bundle(manifest, files)


def run_of(name: str) -> str:
    return name.rsplit("/", 1)[-1].removesuffix(SUFFIX)
