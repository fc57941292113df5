"""The datasets' part of `homelab recover` (homelab.backup.recover): where every object of each dataset is on
the remote, found once - one listing each of `meta/`, `archive/` and `current/` for every dataset, each
dataset's chosen listing fetched - and checked before anything is written; then the datasets restored side
by side, each with what was found (no second fetch of its listing, no second walk of the remote).

Restores run in parallel (`WORKERS`, each an rclone copy with its own transfers): a small dataset is not
queued behind a large one, as one `rclone copy` of everything would not queue it.
"""

from __future__ import annotations

import os
import shutil
import stat
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from homelab.backup import listing
from homelab.backup.context import BackupError, Context
from homelab.backup.restore import chosen_listing, restore
from homelab.plan_model import Dataset

WORKERS = 3


@dataclass(frozen=True)
class Located:
    """A dataset's listing as of the bundle and where each of its objects is now (listing.sources)."""

    dataset: Dataset
    chosen: listing.Listing
    found: dict[str, list[str]]


def locate(ctx: Context, remote: str, datasets: list[Dataset], at: datetime) -> tuple[list[Located], list[str]]:
    """(each dataset located, problems): every object the chosen listings name must be on the remote."""
    located: list[Located] = []
    problems: list[str] = []
    if not datasets:
        return located, problems
    listed: dict[str, list[listing.Listed]] = {}

    def choose(d: Dataset) -> listing.Listing | BackupError:
        try:
            return chosen_listing(ctx, d, remote, at, listed.get(d.key, []))
        except BackupError as exc:
            return exc

    with ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="recover-listing") as pool:  # side by side
        metas = pool.submit(listing.every_listing, ctx, remote)
        archives = pool.submit(listing.archived_runs, ctx, remote)
        current = pool.submit(ctx.rclone.list_files, ctx.remote_path(remote, "current"), recursive=True)
        listed.update(metas.result())
        chosen_all = list(pool.map(choose, datasets))  # each dataset's listing downloaded
        archived, held = archives.result(), set(current.result())
    for d, chosen in zip(datasets, chosen_all, strict=True):
        if isinstance(chosen, BackupError):
            problems.append(str(chosen))
            continue
        wanted = [e.rclone_name for e in chosen.entries if e.has_object]
        found = listing.sources(ctx, d, remote, chosen.run, wanted, archived)
        in_current = found.get(ctx.remote_path(remote, "current", d.key), [])
        lost = [n for n in in_current if f"{d.key}/{n}" not in held]
        if lost:
            shown = ", ".join(lost[:5]) + (f" (and {len(lost) - 5} more)" if len(lost) > 5 else "")
            problems.append(f"dataset {d.key}: {len(lost)} objects missing on the remote: {shown}")
        located.append(Located(d, chosen, found))
    return located, problems


def restore_all(
    ctx: Context,
    remote: str,
    located: list[Located],
    run: str,
    clear: bool,
    done: Callable[[Dataset, float, int], None],
) -> None:
    """Each dataset restored into its folder, side by side; `done` (in this thread) after each one. The first
    failure is raised once the restores under way have ended (`done` was called for every one that finished)."""
    failures: list[BackupError] = []
    with ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="recover") as pool:
        began = time.monotonic()
        futures = {pool.submit(_restore_one, ctx, remote, where, run, clear): where for where in located}
        for future in as_completed(futures):
            try:
                files = future.result()
            except BackupError as exc:
                failures.append(exc)
                continue
            done(futures[future].dataset, began, files)
    if failures:
        raise failures[0]


def _restore_one(ctx: Context, remote: str, where: Located, run: str, clear: bool) -> int:
    """Restore into the dataset's folder, which `storage apply` may have given an empty acme.json: into a
    folder inside it (the same filesystem), then each entry moved up, the root's owner, mode and mtime last."""
    path = Path(where.dataset.path)
    if clear:
        clear_folder(path)
    staging = path / f".homelab-recover-{run}"
    if staging.exists():
        shutil.rmtree(staging)  # what a recovery stopped midway left
    result = restore(ctx, where.dataset.key, staging, remote=remote, chosen=where.chosen, found=where.found)
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


def clear_folder(path: Path) -> None:
    for child in path.iterdir():
        if child.name == ".zfs":
            continue
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()
