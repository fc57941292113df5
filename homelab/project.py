"""The library entry points the CLI calls: load -> plan -> render -> diff -> apply."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from homelab import writer
from homelab.certs.staging import with_stages
from homelab.config.loaded import LoadedConfig
from homelab.engine.interface import stack_files_for
from homelab.layout import SECRETS_DIR, STACKS_DIR
from homelab.plan import build_plan
from homelab.plan_model import Plan
from homelab.render import render_all
from homelab.render.rendering import Rendering
from homelab.secrets import secret_contents, user_secret_values


@dataclass
class RenderResult:
    plan: Plan
    rendering: Rendering
    report: writer.WriteReport
    out: Path


def default_out(loaded: LoadedConfig) -> Path:
    return loaded.base_dir / STACKS_DIR


def render_project(
    loaded: LoadedConfig,
    out: Path | None = None,
    *,
    force: bool = False,
    dry_run: bool = False,
    plan: Plan | None = None,
) -> RenderResult:
    """Render every stack (of `plan`, default: the config's) and diff it against `out`; write the
    changes unless `dry_run`."""
    out = (out or default_out(loaded)).resolve()
    plan = with_stages(plan or build_plan(loaded))  # the staging-first switch reads what the edge holds
    rendering = render_all(plan, user_secret_values(loaded), stack_files_for(plan.config))
    secrets = secret_contents(plan, out / SECRETS_DIR, rendering.secret_files)
    report = writer.diff(out, rendering.files, secrets, force=force)
    if not dry_run:
        writer.apply(out, report, rendering.files, secrets, plan)
    return RenderResult(plan, rendering, report, out)
