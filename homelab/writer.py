"""Diff a Rendering against disk and write only what changed.

A manifest (`.homelab-manifest.json` in the stacks folder) records the hash of every file we wrote.
A file that exists but is not ours, or that someone edited since we wrote it, is never overwritten
without `force`. Secret files go to `<stacks>/secrets/` (0700), each 0600 and owned by the uid of
the service that reads it; their contents never appear in a report.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from homelab.errors import RefusedToOverwrite
from homelab.plan import Plan
from homelab.render.compose import SECRETS_DIR

MANIFEST = ".homelab-manifest.json"
Status = Literal["new", "changed", "identical", "obsolete"]


@dataclass(frozen=True)
class FileChange:
    path: str  # relative to the stacks folder
    status: Status
    secret: bool = False


@dataclass
class WriteReport:
    changes: list[FileChange] = field(default_factory=list)

    def by_status(self, status: Status) -> list[FileChange]:
        return [c for c in self.changes if c.status == status]

    @property
    def changed(self) -> bool:
        return any(c.status != "identical" for c in self.changes)

    def stacks_affected(self, plan: Plan) -> list[str]:
        touched = {c.path.split("/", 1)[0] for c in self.changes if c.status != "identical" and not c.secret}
        secrets = {c.path.split("/", 1)[1] for c in self.changes if c.status != "identical" and c.secret}
        for stack in plan.stacks.values():
            if any(name in secrets for s in stack.services.values() for name, _ in s.secrets):
                touched.add(stack.name)
        return [name for name in plan.stacks if name in touched]


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _read_manifest(out: Path) -> dict[str, str]:
    try:
        data = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
        return dict(data.get("files", {}))
    except (FileNotFoundError, ValueError):
        return {}


def diff(out: Path, files: dict[str, bytes], secret_files: dict[str, bytes], *, force: bool = False) -> WriteReport:
    manifest = _read_manifest(out)
    report = WriteReport()
    refused = []
    for rel, content in sorted(files.items()):
        path = out / rel
        if not path.exists():
            report.changes.append(FileChange(rel, "new"))
            continue
        current = path.read_bytes()
        if current == content:
            report.changes.append(FileChange(rel, "identical"))
            continue
        if not force and manifest.get(rel) != _sha(current):
            refused.append(rel)
        report.changes.append(FileChange(rel, "changed"))
    for name, content in sorted(secret_files.items()):
        path = out / SECRETS_DIR / name
        status: Status = "new" if not path.exists() else "identical" if path.read_bytes() == content else "changed"
        report.changes.append(FileChange(f"{SECRETS_DIR}/{name}", status, secret=True))
    for rel, digest in sorted(manifest.items()):
        path = out / rel
        if rel not in files and path.is_file() and _sha(path.read_bytes()) == digest:
            report.changes.append(FileChange(rel, "obsolete"))
    if refused:
        listing = "\n  ".join(str(out / r) for r in refused)
        raise RefusedToOverwrite(
            f"not overwriting files homelab did not write or that were edited by hand:\n  {listing}\n"
            "edit homelab.yaml instead, or pass --force to replace them"
        )
    return report


def _write_atomic(path: Path, content: bytes, mode: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.write(fd, content)
        os.fchmod(fd, mode)  # O_CREAT's mode is filtered by the umask
    finally:
        os.close(fd)
    tmp.replace(path)


def apply(out: Path, report: WriteReport, files: dict[str, bytes], secret_files: dict[str, bytes], plan: Plan) -> None:
    """Write what `diff` found new or changed; remove obsolete files we wrote and nobody edited."""
    if not report.changed and (out / MANIFEST).exists():
        _fix_secret_modes(out, plan)
        return
    secrets_dir = out / SECRETS_DIR
    secrets_dir.mkdir(parents=True, exist_ok=True)
    secrets_dir.chmod(0o700)
    for change in report.changes:
        if change.status in ("new", "changed"):
            if change.secret:
                name = change.path.split("/", 1)[1]
                _write_atomic(secrets_dir / name, secret_files[name], 0o600)
            else:
                _write_atomic(out / change.path, files[change.path], _mode_for(change.path))
        elif change.status == "obsolete":
            (out / change.path).unlink()
    _fix_secret_modes(out, plan)
    manifest = {"files": {rel: _sha(content) for rel, content in sorted(files.items())}}
    _write_atomic(out / MANIFEST, (json.dumps(manifest, indent=1) + "\n").encode(), 0o644)


def _mode_for(rel: str) -> int:
    return 0o755 if rel.endswith(".sh") else 0o644


def _fix_secret_modes(out: Path, plan: Plan) -> None:
    """Secrets stay 0600 and owned by their reader, even if someone loosened them by hand."""
    can_chown = hasattr(os, "geteuid") and os.geteuid() == 0
    for name, secret in plan.secrets.items():
        path = out / SECRETS_DIR / name
        if not path.exists():
            continue
        path.chmod(0o600)
        if can_chown:
            os.chown(path, secret.owner_uid, secret.owner_gid)
