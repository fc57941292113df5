"""Sentinels: per app, a small fact written where the app keeps its data, before each run's snapshots, and
read back after a recovery (homelab.backup.recover): proof that the app's own data came back, not only
that its container is healthy.

Each is written into the dataset's folder as the app lays its data out (the real images' paths; see
docs/recovery.md), owned by the dataset's uid/gid, holding the run's id:
- nextcloud/data: `admin/files/homelab-sentinel.txt` (a file in the admin's files: `occ files:scan`
  shows it in the web UI);
- jenkins/home: `jobs/homelab-sentinel/config.xml`, a job whose description is the value;
- plex/config: the `HomelabSentinel` attribute of Preferences.xml, when Plex made that file (never made
  by homelab: Plex writes it on its first start);
- rstudio/home: `homelab-sentinel.txt` in the rstudio user's home;
- gitea/data: a commit in the bare repository `homelab/homelab-sentinel.git` under Gitea's repository root
  (`git/repositories`, the rootless image's `[repository] ROOT`), its message the value
  (homelab.backup.sentinel_formats);
- monitoring/graphite (only when backed up: `backup: false` by default): the point of the metric
  `homelab.sentinel.run` at the run's hour in its whisper file, the run's time in epoch seconds;
- each running Postgres server (Nextcloud's database): a row in its database (homelab.backup.databases),
  read back through the recovered server once the stacks are up.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from homelab.backup import databases, sentinel_formats
from homelab.plan_model import Dataset, Plan
from homelab.runtime.docker import Engine

Kind = Literal["file", "preference", "row", "git", "whisper"]
PLEX_PREFERENCES = "Library/Application Support/Plex Media Server/Preferences.xml"
PLEX_ATTRIBUTE = "HomelabSentinel"
JENKINS_JOB = """<?xml version='1.1' encoding='UTF-8'?>
<project>
  <description>{value}</description>
  <keepDependencies>false</keepDependencies>
  <disabled>true</disabled>
  <builders/>
</project>
"""


class Sentinel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    app: str
    dataset: str  # <app>/<role>
    path: str  # relative to the dataset's folder
    kind: Kind
    value: str
    server: str | None = None  # a row's: <stack>/<service> of its Postgres server


@dataclass(frozen=True)
class Where:
    dataset: str
    path: str
    kind: Kind


PLACES = {
    "nextcloud": Where("nextcloud/data", "admin/files/homelab-sentinel.txt", "file"),
    "jenkins": Where("jenkins/home", "jobs/homelab-sentinel/config.xml", "file"),
    "plex": Where("plex/config", PLEX_PREFERENCES, "preference"),
    "rstudio": Where("rstudio/home", "homelab-sentinel.txt", "file"),
    "gitea": Where("gitea/data", "git/repositories/homelab/homelab-sentinel.git", "git"),
    "monitoring": Where("monitoring/graphite", "whisper/homelab/sentinel/run.wsp", "whisper"),
}


def _own(root: Path, d: Dataset) -> None:
    """What a sentinel made under the dataset's folder, owned as the dataset (the app writes there too)."""
    if os.geteuid() != 0:
        return
    for parent in [root, *(p for p in root.parents if Path(d.path) in p.parents)]:
        os.chown(parent, d.uid, d.gid)
    for folder, dirs, files in os.walk(root) if root.is_dir() else []:
        for name in dirs + files:
            os.chown(Path(folder) / name, d.uid, d.gid)


def _write_file(path: Path, text: str, d: Dataset) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    _own(path, d)


_ATTRIBUTE = re.compile(rf'\s{PLEX_ATTRIBUTE}="[^"]*"')


def write_all(
    datasets: list[Dataset],
    value: str,
    when: int,
    engine: Engine | None = None,
    servers: Sequence[databases.Server] = (),
) -> list[Sentinel]:
    """Write each enabled app's sentinel whose dataset this backup holds, and a row in each running Postgres
    server; the sentinels written. `value`: the run's id; `when`: its time (epoch seconds)."""
    by_key = {d.key: d for d in datasets}
    written = []
    for app, where in PLACES.items():
        d = by_key.get(where.dataset)
        if d is None:
            continue
        path = Path(d.path) / where.path
        if where.kind in ("git", "whisper"):
            if where.kind == "git":
                sentinel_formats.git_commit(path, value, when)
            else:
                sentinel_formats.whisper_point(path, when, float(when))
            _own(path, d)
            kept = value if where.kind == "git" else str(when)
            written.append(Sentinel(app=app, dataset=d.key, path=where.path, kind=where.kind, value=kept))
            continue
        if where.kind == "preference":
            if not path.is_file():
                continue
            text = _ATTRIBUTE.sub("", path.read_text(encoding="utf-8"))
            text = text.replace("<Preferences ", f'<Preferences {PLEX_ATTRIBUTE}="{value}" ', 1)
        else:
            text = JENKINS_JOB.format(value=value) if app == "jenkins" else value + "\n"
        _write_file(path, text, d)
        written.append(Sentinel(app=app, dataset=d.key, path=where.path, kind=where.kind, value=value))
    for server in servers if engine is not None else []:
        assert engine is not None
        if databases.running(engine, server):
            databases.write_row(engine, server, value)
            name = f"{server.stack}/{server.dump.service}"
            written.append(
                Sentinel(app=server.stack, dataset="", path=databases.TABLE, kind="row", value=value, server=name)
            )
    return written


def read(sentinel: Sentinel, folder: Path) -> str | None:
    """The value found where the sentinel was written, None when it is not there."""
    path = folder / sentinel.path
    if sentinel.kind == "git":
        return sentinel_formats.git_read(path)
    if sentinel.kind == "whisper":
        found_value = sentinel_formats.whisper_read(path, int(sentinel.value))
        return None if found_value is None else str(int(found_value))
    if not path.is_file():
        return None
    text = path.read_text(encoding="utf-8", errors="replace")
    if sentinel.kind == "preference":
        found = re.search(rf'\s{PLEX_ATTRIBUTE}="([^"]*)"', text)
        return found.group(1) if found else None
    if sentinel.app == "jenkins":
        found = re.search(r"<description>(.*)</description>", text)
        return found.group(1) if found else None
    return text.strip()


def check_all(
    sentinels: list[Sentinel], plan: Plan, engine: Engine | None, servers: list[databases.Server]
) -> tuple[list[str], list[str]]:
    """(read back, problems) for every sentinel: files in the recovered datasets' folders, rows through the
    recovered servers (not checked when no stack was started)."""
    folders = {d.key: Path(d.path) for d in plan.datasets}
    by_name = {f"{s.stack}/{s.dump.service}": s for s in servers}
    ok, problems = [], []
    for s in sentinels:
        if s.kind == "row":
            server = by_name.get(s.server or "")
            if engine is None:
                continue
            got = databases.read_row(engine, server, s.value) if server is not None else None
        else:
            folder = folders.get(s.dataset)
            got = read(s, folder) if folder is not None else None
        if got == s.value:
            ok.append(f"{s.app}: {s.server or s.dataset} {s.path} = {s.value}")
        else:
            problems.append(f"{s.app}: {s.path} in {s.server or s.dataset} reads {got!r}, the backup wrote {s.value!r}")
    return ok, problems
