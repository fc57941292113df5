"""Retention on a simulated clock: exact counts over 400 days; protected snapshots survive."""

from __future__ import annotations

import os
import subprocess
from datetime import UTC, datetime, timedelta

import pytest

from homelab.backup import context, prune
from homelab.backup.context import Context
from homelab.backup.records import DatasetRun, Run, Running
from homelab.backup.retention import Policy, snapshot_name, to_prune
from tests.backup.conftest import KEY

START = datetime(2024, 1, 1, tzinfo=UTC)
POLICY = Policy(hourly=24, daily=30, monthly=12)


def _simulate(step: timedelta, days: int, protect_at: int | None = None) -> tuple[list[str], int, str | None]:
    kept: list[str] = []
    most = 0
    protected = None
    t = START
    i = 0
    while t < START + timedelta(days=days):
        name = snapshot_name(t)
        kept.append(name)
        if protect_at is not None and i == protect_at:
            protected = name
        doomed = set(to_prune(kept, POLICY, t, [protected] if protected else []))
        assert protected not in doomed
        kept = [n for n in kept if n not in doomed]
        most = max(most, len(kept))
        t += step
        i += 1
    return kept, most, protected


def test_hourly_snapshots_for_400_days() -> None:
    kept, most, protected = _simulate(timedelta(hours=1), 400, protect_at=24 * 100 + 7)
    # now = 2025-02-03 23:00: 24 hourly (Feb 3) + 29 daily (Jan 5..Feb 2 at 23:00) + 10 monthly (Mar..Dec 2024
    # month ends; Feb 2025 and Jan 2025 are already kept) + the protected one (2024-04-10 07:00)
    assert len(kept) == 24 + 29 + 10 + 1
    assert most <= 24 + 30 + 12 + 1
    assert protected == "homelab-20240410T070000Z" and protected in kept
    monthly = sorted(n for n in kept if n.endswith("T230000Z") and n < "homelab-20250101")
    assert monthly == [
        snapshot_name(datetime(2024, m + 1, 1, tzinfo=UTC) - timedelta(hours=1)) for m in range(3, 12)
    ] + ["homelab-20241231T230000Z"]
    # one-shot pruning of the full history gives the same answer as pruning every hour
    everything = [snapshot_name(START + timedelta(hours=h)) for h in range(400 * 24)]
    now = START + timedelta(hours=400 * 24 - 1)
    left = set(everything) - set(to_prune(everything, POLICY, now, [protected]))
    assert left == set(kept)


def test_daily_backups_for_400_days() -> None:
    kept, _, _ = _simulate(timedelta(days=1), 400)
    # last = 2025-02-03 00:00: 30 daily + Mar..Dec 2024 month ends (10); hourly adds nothing new
    assert len(kept) == 30 + 10


def test_foreign_and_future_snapshots_are_never_pruned() -> None:
    names = ["manual-before-upgrade", "homelab-garbage", snapshot_name(START), snapshot_name(START + timedelta(days=9))]
    assert to_prune(names, Policy(0, 0, 0), START + timedelta(days=5)) == [snapshot_name(START)]


@pytest.mark.real
def test_prune_on_a_real_dataset_keeps_running_and_last_success(lab, monkeypatch: pytest.MonkeyPatch) -> None:
    now = datetime(2025, 6, 15, 12, 0, tzinfo=UTC)
    ctx = context(lab.loaded, state_dir=lab.state, clock=lambda: now)
    times = [now - timedelta(days=d) for d in range(10)]
    for t in times:
        subprocess.run(["zfs", "snapshot", f"{lab.dataset}@{snapshot_name(t)}"], check=True)
    subprocess.run(["zfs", "snapshot", f"{lab.dataset}@manual"], check=True)
    last_good, running = snapshot_name(times[8]), snapshot_name(times[6])
    ctx.state.save_run(
        Run(
            id="20250607T120000Z",
            start=datetime(2025, 6, 7, 12, 0, tzinfo=UTC),
            end=datetime(2025, 6, 7, 12, 5, tzinfo=UTC),
            result="success",
            snapshot=last_good,
            remotes=["offsite"],
            datasets=[DatasetRun(dataset=lab.dataset, key=KEY, remote="offsite", snapshot=last_good)],
        )
    )
    ctx.state.mark_running(Running(pid=os.getpid(), run="x", snapshots={lab.dataset: running}))
    policy = ctx.loaded.config.backup.retention
    assert (policy.hourly, policy.daily, policy.monthly) == (24, 30, 12)
    monkeypatch.setattr(Context, "policy", property(lambda self: Policy(hourly=1, daily=3, monthly=1)))
    doomed = prune(ctx, ctx.datasets[0])
    left = subprocess.run(
        ["zfs", "list", "-H", "-o", "name", "-t", "snapshot"], capture_output=True, text=True, check=True
    ).stdout.split()
    left = sorted(n.split("@")[1] for n in left if n.startswith(lab.dataset + "@"))
    assert sorted(doomed) == sorted(snapshot_name(times[d]) for d in (3, 4, 5, 7, 9))
    assert left == sorted(["manual", *(snapshot_name(times[d]) for d in (0, 1, 2, 6, 8))])
