"""Shared names (homelab/layout.py), file ownership (homelab/ownership.py), and decisions keyed on data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from homelab import layout
from homelab.engine.model import ServiceAction, StackPlan
from homelab.errors import RefusedToOverwrite
from homelab.ownership import MANIFEST, is_ours, read_manifest, write_manifest, write_owned
from homelab.runtime.docker import Container


def test_names() -> None:
    assert layout.project_name("dev") == "homelab-dev"
    assert layout.PROXY_NETWORK == "homelab-proxy"
    assert layout.secret_name("nextcloud", "db_password") == "nextcloud_db_password"
    assert layout.DDCLIENT_CONF_SECRET == "edge_ddclient_conf"
    assert layout.COLLECTD_IPMI_SECRET == "monitoring_collectd_ipmi_conf"
    assert str(layout.DEFAULT_CONFIG) == "homelab.yaml"


def test_a_file_is_ours_only_while_it_holds_what_we_wrote(tmp_path: Path) -> None:
    unit = tmp_path / "homelab-backup.timer"
    assert is_ours(tmp_path, unit.name)  # absent: free to write
    unit.write_text("[Timer]\n")
    assert not is_ours(tmp_path, unit.name)  # someone else's file
    write_manifest(tmp_path, {unit.name: b"[Timer]\n"})
    assert is_ours(tmp_path, unit.name)
    assert (tmp_path / MANIFEST).stat().st_mode & 0o777 == 0o644
    unit.write_text("[Timer]\nOnCalendar=daily\n")
    assert not is_ours(tmp_path, unit.name)  # edited by hand since


def test_an_unreadable_manifest_owns_nothing(tmp_path: Path) -> None:
    (tmp_path / MANIFEST).write_text("{not json")
    assert read_manifest(tmp_path) == {}
    (tmp_path / MANIFEST).write_text(json.dumps({"files": {"a": "0" * 64}}))
    assert read_manifest(tmp_path) == {"a": "0" * 64}


def _container(config_hash: str) -> Container:
    return Container(
        id="id", name="homelab-dev-gitea-1", project="homelab-dev", service="gitea", state="running",
        health="healthy", health_output="", exit_code=0, config_hash=config_hash, image="gitea",
        image_id="sha256:1", created="", started_at="", env=(), mounts=(), ports=(),
    )  # fmt: skip


def test_forced_recreation_is_decided_by_cause_not_by_wording(tmp_path: Path) -> None:
    """compose recreates a changed config by itself; only other causes must be forced."""
    running = _container("h")
    stack = StackPlan(
        "dev",
        tmp_path,
        [
            ServiceAction("dev", "a", "recreate", "config changed (labels)", running, "config"),
            ServiceAction("dev", "b", "recreate", "config changed", running, "inputs"),
            ServiceAction("dev", "c", "recreate", "image gitea updated", running, "image"),
            ServiceAction("dev", "d", "create", "new", None, "new"),
        ],
    )
    assert stack.forced == ["b", "c"]


def test_write_owned_refuses_foreign_files_and_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "other.service").write_text("[Unit]\n")  # someone else's unit, never recorded
    written = write_owned(tmp_path, {"a.timer": b"1\n", "b.service": b"2\n"})
    assert sorted(p.name for p in written) == ["a.timer", "b.service"]
    assert (tmp_path / "a.timer").stat().st_mode & 0o777 == 0o644
    assert sorted(read_manifest(tmp_path)) == ["a.timer", "b.service"]
    write_owned(tmp_path, {"a.timer": b"1 again\n"})  # ours: rewritten, b stays recorded
    assert sorted(read_manifest(tmp_path)) == ["a.timer", "b.service"]
    with pytest.raises(RefusedToOverwrite, match=r"other\.service"):
        write_owned(tmp_path, {"a.timer": b"3\n", "other.service": b"mine now\n"})
    assert (tmp_path / "a.timer").read_bytes() == b"1 again\n"  # nothing written
    assert (tmp_path / "other.service").read_text() == "[Unit]\n"
