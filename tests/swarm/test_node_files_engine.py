"""The one-shot job that prepares a service's files on its node (homelab/engine/swarm_files.py), on the
real engine's swarm: acme.json made 0600 and a dataset folder owned by its uid through the node's own
files, and a job no node may take fails naming Swarm's reason."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from homelab.engine.host import Needed
from homelab.engine.swarm_files import script
from homelab.errors import CommandFailed
from homelab.runtime.swarm import SwarmCli

pytestmark = pytest.mark.docker


def test_a_job_prepares_acme_json_and_a_dataset_folder_on_the_node(swarm, world, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _, _, images = world
    acme, folder = tmp_path / "edge" / "acme" / "acme.json", tmp_path / "gitea" / "data"
    items = [Needed(folder, "folder", 1000, 1000), Needed(acme, "acme")]
    out = SwarmCli().run_job("homelab-test-prepare", images["traefik"], [], script(items), timeout=60)
    assert out.splitlines() == [f"created {folder}", f"created {acme}"]
    assert stat.S_IMODE(acme.stat().st_mode) == 0o600 and acme.read_bytes() == b""
    assert (folder.stat().st_uid, folder.stat().st_gid, stat.S_IMODE(folder.stat().st_mode)) == (1000, 1000, 0o750)
    again = SwarmCli().run_job("homelab-test-prepare", images["traefik"], [], script(items), timeout=60)
    assert again == ""  # all there: nothing made


def test_a_job_no_node_may_take_fails_with_swarms_reason(swarm, world) -> None:  # type: ignore[no-untyped-def]
    _, _, images = world
    with pytest.raises(CommandFailed) as caught:
        SwarmCli().run_job(
            "homelab-test-nowhere", images["traefik"], ["node.labels.nowhere == true"], "true", timeout=5
        )
    assert "no suitable node" in caught.value.stderr, caught.value.stderr
