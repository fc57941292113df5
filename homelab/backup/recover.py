"""`homelab recover`: the whole server back from the offsite backup onto a bare machine.

Steps, each printed with the time it took: find the newest complete recovery bundle (or the newest at or
before `--at`) and check it (homelab.backup.bundle); check the target (no homelab config, no dataset with
data, unless `replace`); check that every object the datasets' listings name is on the remote and that
every database dump is whole; only then write the config folder (homelab.yaml rewritten for another
pool, mountpoint or domain), create the datasets (`storage apply`, or plain folders), restore every
dataset, put the edge's certificates back, bring the stacks up through `homelab up`'s own session
(homelab/up.py on the engine the recovered config names: dependency order, the health gate, the declared
state) and read each app's sentinel back (homelab.backup.sentinel). At the end:
the time it took (RTO) and the age of the data recovered (RPO).

Everything it writes is listed in the journal (`<config folder>/.homelab-recover/journal.json`): a
recovery stopped midway (a remote lost: rclone's stall limit bounds every transfer) says what is done and
what is not, and the next `recover` into the same folder continues from the same bundle.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from homelab.backup import bundle, databases, sentinel
from homelab.backup.context import Context, Say, quiet, utcnow
from homelab.backup.recover_datasets import clear_folder, locate, restore_all
from homelab.backup.recovery import (
    REMOTE,
    STATE_DIR,
    Journal,
    RecoverError,
    Target,
    TargetNotEmpty,
    check_dumps,
    fetch,
    pick,
    rclone_for,
    read_journal,
    refusals,
    rewrite_config,
    save_journal,
)
from homelab.backup.snapshots import Snapshots
from homelab.backup.state import State, write_private
from homelab.config.loaded import LoadedConfig
from homelab.config.loader import load
from homelab.config.models import Config
from homelab.engine.host import prepare_host
from homelab.engine.interface import Engine
from homelab.errors import CommandFailed, HomelabError
from homelab.plan import build_plan
from homelab.plan_model import Dataset, Plan
from homelab.runtime.docker import Engine as Docker
from homelab.runtime.rclone import RcloneDriver
from homelab.storage import apply_storage

EngineFor = Callable[[Config], Engine]  # the engine the recovered config names (interface.engine_for)

__all__ = ["RecoverError", "Recovered", "Target", "TargetNotEmpty", "recover", "rewrite_config", "start_stacks"]


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
    save_journal(state, journal)


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
    """Every stack up through `homelab up`'s session (homelab/up.py): the engine checked, dependency order,
    the health gate, every declared service running and healthy at the end (ApplyFailed naming each one
    down), the staging-first switch; the stacks applied."""
    from homelab import up as session
    from homelab.project import default_out

    loaded_for_up = session.Loaded(loaded, build_plan(loaded), default_out(loaded).resolve())
    shown = session.Shown(plan=lambda _result, _convergence: None, progress=say, say=say)
    report = session.up(loaded_for_up, engine, session.UpOptions(timeout=timeout), shown)
    return report.applied.applied if report.applied is not None else []


# --- the whole recovery ---------------------------------------------------------------------------


@dataclass
class _Run:
    """One recovery under way: what each phase hands the next."""

    target: Target
    state: State
    found: bundle.Bundle
    journal: Journal
    resume: bool
    steps: _Steps


def recover(
    target: Target,
    *,
    engine: EngineFor | None = None,
    say: Say = quiet,
    clock: Callable[[], datetime] = utcnow,
    driver: RcloneDriver | None = None,
) -> Recovered:
    """Recover onto this machine; `engine`: the stacks' engine for the recovered config (None: start none).
    RecoverError (nothing started, what was written listed) when it cannot."""
    state = State(target.config_dir / STATE_DIR)
    state.ensure()
    resume = read_journal(state)
    if resume is not None and resume.finished:
        resume = None
    rclone = driver or rclone_for(target, state)
    result = Recovered(run="")
    steps = _Steps(result, say)
    t = time.monotonic()
    result.run = pick(rclone, target, resume)
    found = fetch(rclone, state, result.run)
    steps.done(
        "bundle", t, f"{result.run} ({len(found.manifest.members)} files, homelab {found.manifest.homelab_version})"
    )
    t = time.monotonic()
    config = _admit(target, found, resume)
    work = _Run(target, state, found, resume or Journal(bundle=result.run), resume is not None, steps)
    steps.done("target", t, "empty" if resume is None else f"continuing ({len(work.journal.restored)} datasets done)")
    try:
        loaded, plan = _restore_all(work, config, rclone, clock)
    except HomelabError as exc:
        save_journal(state, work.journal)
        raise RecoverError(_stopped(exc, work.journal, datasets_of(found))) from None
    servers = databases.servers(plan, loaded.base_dir)
    docker = None
    if engine is not None:
        t = time.monotonic()
        stacks = engine(loaded.config)
        result.started = start_stacks(loaded, stacks, say)
        steps.done("stacks", t, f"{', '.join(result.started) or 'every stack already'} healthy")
        docker = stacks.compose_driver()
        _load_dumps(work, docker, servers)
    t = time.monotonic()
    result.sentinels, wrong = sentinel.check_all(found.manifest.sentinels, plan, docker, servers)
    if wrong:
        raise RecoverError("recovered, but the apps' data is not what was backed up: " + "; ".join(wrong))
    steps.done("sentinels", t, f"{len(result.sentinels)} read back" if result.sentinels else "none in the bundle")
    work.journal.finished = True
    save_journal(state, work.journal)
    result.written = work.journal.written
    result.rto = time.monotonic() - steps.began
    result.rpo = (clock() - found.manifest.created).total_seconds()
    return result


def _admit(target: Target, found: bundle.Bundle, resume: Journal | None) -> bytes:
    """The config for the target, once nothing stands in the way; else RecoverError, nothing written."""
    original = found.member(f"config/{found.manifest.config_name}")
    config = rewrite_config(original, target)
    refused = refusals(target, found, original, config, resume)
    if refused:
        raise TargetNotEmpty("refusing to recover: " + "; ".join(refused) + _nothing(target, "; pass --replace"))
    broken = check_dumps(found)
    if broken:
        run = found.manifest.run
        raise RecoverError(f"bundle {run}: " + "; ".join(broken) + _nothing(target, "; use --at for an older bundle"))
    return config


def _restore_all(
    work: _Run, config: bytes, rclone: RcloneDriver, clock: Callable[[], datetime]
) -> tuple[LoadedConfig, Plan]:
    target, found, journal, steps = work.target, work.found, work.journal, work.steps
    t = time.monotonic()
    _write_config(target, found, config, journal, work.state)
    loaded = load(target.config_dir / found.manifest.config_name)
    plan = build_plan(loaded)
    keys = set(datasets_of(found))
    datasets = [d for d in plan.datasets if d.key in keys]
    ctx = Context(loaded, datasets, work.state, rclone, Snapshots(), [REMOTE], clock)
    steps.done("config", t, f"{len(journal.written)} files into {target.config_dir}")
    t = time.monotonic()
    located, lost = locate(ctx, REMOTE, [d for d in datasets if d.key not in journal.restored], found.manifest.created)
    if lost:
        raise RecoverError("; ".join(lost))
    steps.done("remote", t, f"every object of {len(datasets)} datasets is there")
    t = time.monotonic()
    _storage(plan, target)
    steps.done("datasets", t, f"{len(plan.datasets)} {'folders' if target.folders else 'ZFS datasets'}")

    def restored(d: Dataset, since: float, files: int) -> None:
        journal.restored.append(d.key)
        save_journal(work.state, journal)
        steps.done(f"restore {d.key}", since, f"{files} files")

    restore_all(ctx, REMOTE, located, found.manifest.run, target.replace or work.resume, restored)
    t = time.monotonic()
    steps.done("certificates", t, _certificates(found, plan, journal) if not target.domain else "new domain")
    t = time.monotonic()
    steps.done("databases", t, _fresh_for_dumps(work, plan))
    return loaded, plan


def _dump_needed(found: bundle.Bundle, plan: Plan) -> list[bundle.DumpInfo]:
    """The dumps whose server cannot start from the restored pages (not backed up, or another major)."""
    folders = {d.key: Path(d.path) for d in plan.datasets}
    needed = []
    for dump in found.manifest.dumps:
        folder = folders.get(dump.dataset)
        image = plan.stacks[dump.stack].services[dump.service].image if dump.stack in plan.stacks else ""
        if folder is not None and not databases.pages_start(folder, image):
            needed.append(dump)
    return needed


def _fresh_for_dumps(work: _Run, plan: Plan) -> str:
    """Empty the data folder of each server that will start from its dump (the server initialises it; the
    pages stay in the backup); the journal remembers which dumps to load once it runs."""
    found = work.found
    needed = _dump_needed(found, plan)
    folders = {d.key: Path(d.path) for d in plan.datasets}
    for dump in needed:
        clear_folder(folders[dump.dataset])
        if dump.member not in work.journal.dumps:
            work.journal.dumps.append(dump.member)
    save_journal(work.state, work.journal)
    if not found.manifest.dumps:
        return "no dumps in the bundle"
    loads = ", ".join(f"{d.stack}/{d.service}" for d in needed)
    return f"{loads}: will start empty and load the dump" if needed else "every server starts from its pages"


def _load_dumps(work: _Run, engine: Docker | None, servers: list[databases.Server]) -> None:
    by_name = {(s.stack, s.dump.service): s for s in servers}
    pending = [d for d in work.found.manifest.dumps if d.member in work.journal.dumps]
    if pending and engine is None:
        raise RecoverError(
            "the stacks are up, but the dumps load through Compose (`docker compose exec`), and this config's "
            f"engine is Swarm: load {', '.join(d.member for d in pending)} from the bundle by hand"
        )
    for dump in pending:
        assert engine is not None
        t = time.monotonic()
        server = by_name[(dump.stack, dump.service)]
        with tempfile.NamedTemporaryFile(suffix=".sql", dir=work.state.scratch) as handle:
            handle.write(work.found.member(dump.member))
            handle.flush()
            try:
                databases.load(engine, server, Path(handle.name))
            except (CommandFailed, TimeoutError, ValueError) as exc:  # ValueError: a dump that is not UTF-8
                raise RecoverError(
                    f"the dump of {dump.stack}/{dump.service} did not load (the stacks are up, its database is "
                    f"empty): {exc}"
                ) from None
        work.journal.dumps.remove(dump.member)
        save_journal(work.state, work.journal)
        work.steps.done(f"load {dump.stack}/{dump.service}", t, f"{len(work.found.member(dump.member)) >> 10} KiB")


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
