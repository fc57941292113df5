"""`homelab recover`: the whole server back from the offsite backup onto a bare machine.

Steps, each printed with the time it took: find the newest complete recovery bundle (or the newest at or
before `--at`) and check it (homelab.backup.bundle); check the target (no homelab config, no dataset with
data, unless `replace`); check that every object the datasets' listings name is on the remote and that
every database dump is whole; only then write the config folder (homelab.yaml rewritten for another
pool, mountpoint or domain), create the datasets (`storage apply`, or plain folders), restore every
dataset, put the edge's certificates back, bring the stacks up in dependency order through the health
gate (homelab.backup.recover_up) and read each app's sentinel back (homelab.backup.sentinel). At the end:
the time it took (RTO) and the age of the data recovered (RPO).

Everything it writes is listed in the journal (`<config folder>/.homelab-recover/journal.json`): a
recovery stopped midway (a remote lost: rclone's stall limit bounds every transfer) says what is done and
what is not, and the next `recover` into the same folder continues from the same bundle.
"""

from __future__ import annotations

import os
import shutil
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import yaml
from pydantic import Field

from homelab.backup import bundle, crypt, listing, sentinel
from homelab.backup.context import BackupError, Context, Say, quiet, utcnow
from homelab.backup.records import Record
from homelab.backup.restore import chosen_listing, restore
from homelab.backup.state import State, read_record, write_private
from homelab.backup.zfs import Snapshots
from homelab.config.loader import LoadedConfig, load
from homelab.errors import ExitCode, HomelabError
from homelab.host import prepare_host
from homelab.plan import Dataset, Plan, build_plan
from homelab.runtime.docker import Engine
from homelab.runtime.rclone import Rclone, RcloneDriver, RcloneError
from homelab.storage import apply_storage

REMOTE = "recover"  # the crypt remote's name in the recovery's own rclone config
STATE_DIR = ".homelab-recover"
DUMP_HEAD = b"-- PostgreSQL database dump"
DUMP_TAIL = b"-- PostgreSQL database dump complete"
StartStacks = Callable[[LoadedConfig, Engine, Say], list[str]]


class RecoverError(BackupError):
    """Recovery stopped; the message says why, what was written and what was not."""


class TargetNotEmpty(RecoverError):
    """The machine already holds a homelab config or datasets with data (and no --replace)."""

    exit_code = ExitCode.REFUSED


@dataclass(frozen=True)
class Target:
    remote: str  # any rclone path holding the backups (`/srv/backup`, `:sftp,host=...:path`)
    password: str
    salt: str
    config_dir: Path
    at: datetime | None = None
    pool: str | None = None
    mountpoint: str | None = None
    domain: str | None = None
    replace: bool = False
    folders: bool = False  # plain folders instead of ZFS datasets
    stall_timeout: float = 300


class Journal(Record):
    bundle: str  # the bundle's run
    written: list[str] = Field(default_factory=list)
    restored: list[str] = Field(default_factory=list)  # dataset keys restored completely
    finished: bool = False


@dataclass
class Recovered:
    run: str
    steps: list[tuple[str, float, str]] = field(default_factory=list)
    written: list[str] = field(default_factory=list)
    started: list[str] = field(default_factory=list)  # stacks brought up
    sentinels: list[str] = field(default_factory=list)
    rto: float = 0.0
    rpo: float = 0.0  # seconds between the backup and the end of the recovery


class _Steps:
    def __init__(self, result: Recovered, say: Say) -> None:
        self.result, self.say, self.began = result, say, time.monotonic()

    def done(self, name: str, since: float, detail: str) -> None:
        seconds = time.monotonic() - since
        self.result.steps.append((name, seconds, detail))
        self.say(f"{name:<24} {seconds:7.1f}s  {detail}")


def _driver(target: Target, state: State) -> RcloneDriver:
    driver = Rclone(state.rclone_config, state.logs, stall_timeout=target.stall_timeout)
    text = crypt.recovery_text(driver, REMOTE, target.remote, target.password, target.salt)
    write_private(state.rclone_config, text.encode())
    return driver


def _journal_path(state: State) -> Path:
    return state.root / "journal.json"


def _journal(state: State) -> Journal | None:
    path = _journal_path(state)
    return read_record(path, Journal) if path.is_file() else None


def _save(state: State, journal: Journal) -> None:
    write_private(_journal_path(state), journal.model_dump_json(indent=1).encode())


def _pick(driver: RcloneDriver, target: Target, resume: Journal | None) -> str:
    """The bundle to recover from: the journal's when continuing, else the newest (at or before --at)."""
    root = crypt.crypt_name(REMOTE) + ":"
    try:
        names = [n for n in driver.list_files(root + bundle.FOLDER) if n.endswith(bundle.SUFFIX)]
        if not names and not driver.list_dirs(root):
            held = driver.list_dirs(target.remote) + driver.list_files(target.remote)
    except RcloneError as exc:
        raise RecoverError(f"the remote {target.remote} cannot be read: {exc}") from None
    if not names:
        if driver.list_dirs(root):
            raise RecoverError(f"no recovery bundle on {target.remote}: only dataset backups (made before bundles)")
        if held:
            raise RecoverError(
                f"wrong crypt password or salt: none of the {len(held)} entries on {target.remote} decrypts"
            )
        raise RecoverError(f"no backup on {target.remote}: it is empty")
    runs = sorted(bundle.run_of(n) for n in names)  # by run id: `<stamp>-1.tar` sorts before `<stamp>.tar`
    if resume is not None:
        if resume.bundle not in runs:
            raise RecoverError(f"the bundle {resume.bundle} this recovery started from is gone from the remote")
        return resume.bundle
    if target.at is not None:
        limit = target.at.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
        runs = [r for r in runs if r.split("-")[0] <= limit]
        if not runs:
            raise RecoverError(f"no recovery bundle at or before {target.at.isoformat()} on {target.remote}")
    return runs[-1]


def _fetch(driver: RcloneDriver, state: State, run: str) -> bundle.Bundle:
    name = f"{bundle.FOLDER}/{run}{bundle.SUFFIX}"
    local = state.scratch / f"{run}{bundle.SUFFIX}"
    try:
        driver.copyto(f"{crypt.crypt_name(REMOTE)}:{name}", str(local))
        data = local.read_bytes()
    except (RcloneError, OSError) as exc:
        raise RecoverError(f"bundle {name} could not be read (truncated or damaged?): {exc}") from None
    finally:
        local.unlink(missing_ok=True)
    return bundle.read(data, name)


# --- the config, rewritten for the new machine ------------------------------------------------------


def rewrite_config(original: bytes, target: Target) -> bytes:
    """homelab.yaml for the target: another pool, mountpoint or domain (the file as it was otherwise)."""
    if not (target.pool or target.mountpoint or target.domain):
        return original
    data = yaml.safe_load(original)
    storage = data.setdefault("storage", {})
    if target.pool:
        old_pool = storage.get("pool", "tank")
        storage["root"] = target.pool + str(storage.get("root", f"{old_pool}/homelab"))[len(old_pool) :]
        storage["pool"] = target.pool
    if target.mountpoint:
        old = str(storage.get("mountpoint", "/tank/homelab"))
        storage["mountpoint"] = target.mountpoint
        backup = data.get("backup") or {}
        if str(backup.get("state_dir", "")).startswith(old + "/"):
            backup["state_dir"] = target.mountpoint + backup["state_dir"][len(old) :]
    if target.domain:
        data.setdefault("domain", {})["name"] = target.domain
        data["domain"].setdefault("acme", {})["staging"] = True  # new names: staging first
    return yaml.safe_dump(data, sort_keys=False).encode()


def _mountpoint(config: bytes) -> str:
    return str(((yaml.safe_load(config) or {}).get("storage") or {}).get("mountpoint", "/tank/homelab"))


def _dataset_paths(original: bytes, config: bytes, manifest: bundle.Manifest) -> dict[str, str]:
    """key -> its folder on the target: the bundle's path moved from the old storage.mountpoint to the new."""
    old, new = _mountpoint(original), _mountpoint(config)
    return {d.key: new + d.path[len(old) :] if d.path.startswith(old) else d.path for d in manifest.datasets}


def _occupied(folder: Path) -> bool:
    return folder.is_dir() and any(p.name != ".zfs" for p in folder.iterdir())


def _refusals(
    target: Target, found: bundle.Bundle, original: bytes, config: bytes, resume: Journal | None
) -> list[str]:
    if target.replace or resume is not None:
        return []
    problems = []
    existing = target.config_dir / found.manifest.config_name
    if existing.exists():
        problems.append(f"{existing} exists: this machine already has a homelab config")
    for key, path in sorted(_dataset_paths(original, config, found.manifest).items()):
        if _occupied(Path(path)):
            problems.append(f"dataset {key} ({path}) is not empty")
    return problems


def _check_dumps(found: bundle.Bundle) -> list[str]:
    """A dump that would not load: cut short or not pg_dump's (pg_dump ends every dump with its trailer)."""
    problems = []
    for dump in found.manifest.dumps:
        data = found.member(dump.member)
        if not data.startswith(DUMP_HEAD) or DUMP_TAIL not in data[-4096:]:
            problems.append(f"the dump of {dump.stack}/{dump.service} is not a complete pg_dump (it would not load)")
    return problems


def _write_config(target: Target, found: bundle.Bundle, config: bytes, journal: Journal, state: State) -> None:
    base = target.config_dir
    for m in found.manifest.members:
        if m.kind not in ("config", "named", "override", "secret"):
            continue
        dest = base / m.restore_to if not Path(m.restore_to).is_absolute() else Path(m.restore_to)
        dest.parent.mkdir(parents=True, exist_ok=True)
        data = config if m.kind == "config" else found.member(m.path)
        write_private(dest, data, m.mode if m.kind != "secret" else 0o600)
        if str(dest) not in journal.written:
            journal.written.append(str(dest))
    _save(state, journal)


# --- datasets -----------------------------------------------------------------------------------


def _restore_into(ctx: Context, d: Dataset, at: datetime, run: str) -> int:
    """Restore into the dataset's folder, which `storage apply` may have given an empty acme.json: into a
    folder inside it (the same filesystem), then each entry moved up, the root's owner, mode and mtime last."""
    path = Path(d.path)
    staging = path / f".homelab-recover-{run}"
    if staging.exists():
        shutil.rmtree(staging)  # what a recovery stopped midway left
    result = restore(ctx, d.key, staging, at=at, remote=REMOTE)
    st = staging.lstat()  # the root's, as the listing has it: before moving the entries changes its mtime
    for child in list(staging.iterdir()):
        dest = path / child.name
        if dest.is_dir() and not dest.is_symlink():
            shutil.rmtree(dest)
        child.replace(dest)
    staging.rmdir()
    if os.geteuid() == 0:
        os.chown(path, st.st_uid, st.st_gid)
    path.chmod(stat.S_IMODE(st.st_mode))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    return result.files


def _clear(path: Path) -> None:
    for child in path.iterdir():
        if child.name == ".zfs":
            continue
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()


def _missing_objects(ctx: Context, datasets: list[Dataset], at: datetime) -> list[str]:
    """Every object the chosen listings name, on the remote: checked before anything is written."""
    problems = []
    for d in datasets:
        try:
            chosen = chosen_listing(ctx, d, REMOTE, at)
        except BackupError as exc:
            problems.append(str(exc))
            continue
        wanted = [e.rclone_name for e in chosen.entries if e.has_object]
        current = ctx.remote_path(REMOTE, "current", d.key)
        in_current = listing.sources(ctx, d, REMOTE, chosen.run, wanted).get(current, [])
        held = set(ctx.rclone.list_files(current, recursive=True)) if in_current else set()
        lost = [n for n in in_current if n not in held]
        if lost:
            shown = ", ".join(lost[:5]) + (f" (and {len(lost) - 5} more)" if len(lost) > 5 else "")
            problems.append(f"dataset {d.key}: {len(lost)} objects missing on the remote: {shown}")
    return problems


def _certificates(found: bundle.Bundle, plan: Plan, journal: Journal) -> str:
    """The edge's store from the bundle, unless a restored dataset brought it back already."""
    from homelab.certs.store import store_path

    store = store_path(plan)
    members = [m for m in found.manifest.members if m.kind == "certificates"]
    if store is None or not members:
        return "none in the bundle"
    restored = [Path(d.path) for d in plan.datasets if d.key in journal.restored]
    if any(store == folder or folder in store.parents for folder in restored):
        return f"{store}: restored with its dataset"
    for m in members:
        dest = store if store.suffix == ".json" else store / m.restore_to
        dest.parent.mkdir(parents=True, exist_ok=True)
        write_private(dest, found.member(m.path), m.mode)
        journal.written.append(str(dest))
    return f"{len(members)} files into {store}"


def start_stacks(loaded: LoadedConfig, engine: Engine, say: Say, timeout: float = 300) -> list[str]:
    """Render the stacks and bring every one up in dependency order through the health gate: what `up`
    does on a machine where nothing runs (the one place recover starts stacks)."""
    from homelab import apply
    from homelab.project import render_project

    rendered = render_project(loaded)
    stacks = apply.select_stacks(rendered.plan, [])
    convergence = apply.converge(rendered.plan, rendered.out, engine, stacks, include_removed_stacks=False)
    return apply.apply(convergence, rendered.plan, engine, timeout=timeout, progress=say).applied


# --- the whole recovery ---------------------------------------------------------------------------


def recover(
    target: Target,
    *,
    engine: Engine | None = None,
    start: StartStacks = start_stacks,
    say: Say = quiet,
    clock: Callable[[], datetime] = utcnow,
    driver: RcloneDriver | None = None,
) -> Recovered:
    """Recover onto this machine. RecoverError (nothing started, what was written listed) when it cannot."""
    state = State(target.config_dir / STATE_DIR)
    state.ensure()
    resume = _journal(state)
    if resume is not None and resume.finished:
        resume = None
    rclone = driver or _driver(target, state)
    result = Recovered(run="")
    steps = _Steps(result, say)
    t = time.monotonic()
    run = _pick(rclone, target, resume)
    found = _fetch(rclone, state, run)
    result.run = run
    steps.done("bundle", t, f"{run} ({len(found.manifest.members)} files, homelab {found.manifest.homelab_version})")

    t = time.monotonic()
    original = found.member(f"config/{found.manifest.config_name}")
    config = rewrite_config(original, target)
    refused = _refusals(target, found, original, config, resume)
    if refused:
        raise TargetNotEmpty("refusing to recover: " + "; ".join(refused) + _nothing(target, "; pass --replace"))
    broken = _check_dumps(found)
    if broken:
        raise RecoverError(f"bundle {run}: " + "; ".join(broken) + _nothing(target, "; use --at for an older bundle"))
    journal = resume or Journal(bundle=run)
    steps.done("target", t, "empty" if resume is None else f"continuing ({len(journal.restored)} datasets done)")

    t = time.monotonic()
    try:
        _write_config(target, found, config, journal, state)
        loaded = load(target.config_dir / found.manifest.config_name)
        plan = build_plan(loaded)
        keys = {d.key for d in found.manifest.datasets if d.backed_up}
        datasets = [d for d in plan.datasets if d.key in keys]
        ctx = Context(loaded, datasets, state, rclone, Snapshots(), [REMOTE], clock)
        steps.done("config", t, f"{len(journal.written)} files into {target.config_dir}")
        at = found.manifest.created
        t = time.monotonic()
        lost = _missing_objects(ctx, [d for d in datasets if d.key not in journal.restored], at)
        if lost:
            raise RecoverError("; ".join(lost))
        steps.done("remote", t, f"every object of {len(datasets)} datasets is there")
        t = time.monotonic()
        _storage(plan, target)
        steps.done("datasets", t, f"{len(plan.datasets)} {'folders' if target.folders else 'ZFS datasets'}")
        for d in datasets:
            if d.key in journal.restored:
                continue
            t = time.monotonic()
            if target.replace or resume is not None:
                _clear(Path(d.path))
            files = _restore_into(ctx, d, at, run)
            journal.restored.append(d.key)
            _save(state, journal)
            steps.done(f"restore {d.key}", t, f"{files} files")
        t = time.monotonic()
        steps.done("certificates", t, _certificates(found, plan, journal) if not target.domain else "new domain")
    except HomelabError as exc:
        _save(state, journal)
        raise RecoverError(_stopped(exc, journal, datasets_of(found))) from None
    if engine is not None:
        t = time.monotonic()
        result.started = start(loaded, engine, say)
        steps.done("stacks", t, f"{', '.join(result.started)} healthy")
    t = time.monotonic()
    result.sentinels, wrong = sentinel.check_all(found.manifest.sentinels, plan)
    if wrong:
        raise RecoverError("recovered, but the apps' data is not what was backed up: " + "; ".join(wrong))
    steps.done("sentinels", t, f"{len(result.sentinels)} read back" if result.sentinels else "none in the bundle")
    journal.finished = True
    _save(state, journal)
    result.written = journal.written
    result.rto = time.monotonic() - steps.began
    result.rpo = (clock() - found.manifest.created).total_seconds()
    return result


def datasets_of(found: bundle.Bundle) -> list[str]:
    return [d.key for d in found.manifest.datasets if d.backed_up]


def _nothing(target: Target, hint: str) -> str:
    return f" (nothing written but the recovery's own folder {target.config_dir / STATE_DIR}{hint})"


def _stopped(exc: Exception, journal: Journal, keys: list[str]) -> str:
    left = [k for k in keys if k not in journal.restored]
    return (
        f"recovery stopped, nothing started: {exc}\n"
        f"  written: {len(journal.written)} config files ({', '.join(journal.written[:3])}"
        f"{' ...' if len(journal.written) > 3 else ''})\n"
        f"  restored: {', '.join(journal.restored) or 'no dataset'}\n"
        f"  not restored: {', '.join(left) or 'none'}\n"
        "  run `homelab recover` again with the same options to continue"
    )


def _storage(plan: Plan, target: Target) -> None:
    if target.folders:
        prepare_host(plan, list(plan.stacks))
        return
    apply_storage(plan)
