"""Snapshots past the retention policy are destroyed; never the one a running backup reads, nor the one the
last successful backup of each remote was taken from (verify and drill read it). `take_snapshots` is the
hourly snapshot without upload."""

from __future__ import annotations

from homelab.backup import retention
from homelab.backup.context import Context
from homelab.plan_model import Dataset


def protected(ctx: Context, d: Dataset) -> set[str]:
    keep: set[str] = set()
    marker = ctx.state.running()
    if marker and d.name in marker.snapshots:
        keep.add(marker.snapshots[d.name])
    for remote in ctx.remotes:
        last = ctx.last_success(d.key, remote)
        if last:
            keep.add(last.entry.snapshot)
    return keep


def prune(ctx: Context, d: Dataset, *, dry_run: bool = False) -> list[str]:
    """Destroy the snapshots past the retention policy; one being read right now waits for the next prune."""
    doomed = retention.to_prune(ctx.snapshots.names(d.name), ctx.policy, ctx.clock(), protected(ctx, d))
    if dry_run:
        return doomed
    return [name for name in doomed if ctx.snapshots.destroy(d.name, name)]


def take_snapshots(ctx: Context) -> list[str]:
    """An hourly snapshot of each backed-up dataset (no upload), then pruning."""
    made = []
    name = retention.snapshot_name(ctx.clock())
    for d in ctx.datasets:
        if name not in ctx.snapshots.names(d.name):
            ctx.snapshots.snapshot(d.name, name)
            made.append(f"{d.name}@{name}")
        prune(ctx, d)
    return made
