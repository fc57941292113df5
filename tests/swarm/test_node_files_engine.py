"""The one-shot jobs that prepare and read a service's files on its node (homelab/engine/swarm_files.py),
on the real engine's swarm (Traefik's image: its busybox): acme.json made 0600 and a dataset folder owned
by its uid through the node's own files, acme.json read back with its private keys blanked, and a job no
node may take fails naming Swarm's reason."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from homelab.engine.host import Needed
from homelab.engine.swarm_files import read_output, read_script, script
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
    stored = {"le": {"Account": {"Email": "a@example.com", "PrivateKey": "c2VjcmV0"}, "Certificates": [
        {"domain": {"main": "git.example.com"}, "certificate": "Y2VydA==", "key": "c2VjcmV0Mg==", "Store": "default"}
    ]}}  # fmt: skip
    acme.write_text(json.dumps(stored, indent=2))  # as Traefik writes it (MarshalIndent)
    out = SwarmCli().run_job("homelab-test-read", images["traefik"], [], read_script(acme), timeout=60)
    read = json.loads(read_output(out) or "")
    assert read["le"]["Account"]["PrivateKey"] == "" and read["le"]["Certificates"][0]["key"] == ""
    assert read["le"]["Certificates"][0]["certificate"] == "Y2VydA==" and "c2VjcmV0" not in out
    missing = SwarmCli().run_job(
        "homelab-test-read", images["traefik"], [], read_script(acme.with_suffix(".x")), timeout=60
    )
    assert read_output(missing) is None


def test_a_job_no_node_may_take_fails_with_swarms_reason(swarm, world) -> None:  # type: ignore[no-untyped-def]
    _, _, images = world
    with pytest.raises(CommandFailed) as caught:
        SwarmCli().run_job(
            "homelab-test-nowhere", images["traefik"], ["node.labels.nowhere == true"], "true", timeout=5
        )
    assert "no suitable node" in caught.value.stderr, caught.value.stderr
