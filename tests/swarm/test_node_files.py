"""engine: swarm prepares what a service mounts on the node its placement chooses (homelab/engine/
swarm_files.py), not on the manager: the edge's acme.json on the edge node, dataset folders on the storage
node. The recording swarm fake runs each job's script with /bin/sh in a folder standing for the node's /."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from homelab.engine.swarm_files import prepare_on_nodes
from homelab.errors import CommandFailed
from tests.fakes.swarm import node
from tests.swarm.test_converge import Lab, lab  # noqa: F401 - the fixture


def test_up_prepares_the_edge_files_on_the_edge_node_and_datasets_on_the_storage_node(
    lab: Lab,
    tmp_path: Path,
) -> None:
    edge_node = tmp_path / "edge-node"
    lab.swarm.node_root = edge_node
    lab.swarm.nodes_list = [
        node("nas", labels={"homelab.storage": "true"}),
        node("edge", id="n-edge", role="worker", labels={"homelab.edge": "true"}),
    ]
    lab.up()
    by_constraint = {constraints: image for _, image, constraints in lab.swarm.jobs}
    assert set(by_constraint) == {("node.labels.homelab.edge == true",), ("node.labels.homelab.storage == true",)}
    assert {image.split(":")[0] for image in by_constraint.values()} == {"traefik"}  # a shell and mkdir
    plan, _, _ = lab.plan()
    acme = next(d for d in plan.datasets if d.key == "edge/acme")
    on_node = edge_node / acme.path.lstrip("/") / "acme.json"
    assert stat.S_IMODE(on_node.stat().st_mode) == 0o600 and on_node.read_bytes() == b""
    gitea = next(d for d in plan.datasets if d.owner == "gitea")
    folder = edge_node / gitea.path.lstrip("/")
    assert folder.is_dir() and (folder.stat().st_uid, folder.stat().st_gid) == (gitea.uid, gitea.gid)
    jobs = len(lab.swarm.jobs)
    lab.up()  # nothing to change: no job
    assert len(lab.swarm.jobs) == jobs


def test_something_else_where_acme_json_goes_is_refused_naming_it(lab: Lab, tmp_path: Path) -> None:
    plan, _, _ = lab.plan()
    acme = next(d for d in plan.datasets if d.key == "edge/acme")
    (tmp_path / "node" / acme.path.lstrip("/") / "acme.json").mkdir(parents=True)  # a bind source turned folder
    lab.swarm.node_root = tmp_path / "node"
    with pytest.raises(CommandFailed) as caught:
        prepare_on_nodes(plan, ["edge"], lab.swarm, zfs_datasets=set(), progress=lambda _m: None)
    assert f"{acme.path}/acme.json is not a regular file: remove it" in str(caught.value.stderr)


def test_a_job_no_node_starts_is_said_and_left_to_the_deploy(lab: Lab) -> None:
    plan, _, _ = lab.plan()
    lab.swarm.job_error = "pending: no suitable node (scheduling constraints not satisfied on 1 node)"
    said: list[str] = []
    assert prepare_on_nodes(plan, ["edge"], lab.swarm, zfs_datasets=set(), progress=said.append) == []
    assert said and said[0].startswith("cannot prepare ") and "no suitable node" in said[0], said


def test_a_job_that_fails_on_its_node_is_said_and_left_to_the_deploy(lab: Lab) -> None:
    """A node whose disk is read-only: the folders cannot be made there; the edge's task will be rejected
    and the deploy's gate names Swarm's reason for it (tests/swarm/test_three_nodes.py, on real nodes)."""
    plan, _, _ = lab.plan()
    lab.swarm.job_error = "failed: task: non-zero exit (1)"
    said: list[str] = []
    assert prepare_on_nodes(plan, ["edge"], lab.swarm, zfs_datasets=set(), progress=said.append) == []
    assert said and said[0].startswith("cannot prepare ") and "non-zero exit (1)" in said[0], said


def test_status_certs_and_the_guard_read_acme_json_on_the_edge_node_without_its_keys(lab: Lab, tmp_path: Path) -> None:
    import datetime as dt
    import json

    from homelab.certs.name_status import statuses
    from homelab.engine.swarm_engine import SwarmEngine
    from tests.unit.test_cli_stack import _acme_with_certificate

    plan, _, _ = lab.plan()
    acme = next(d for d in plan.datasets if d.key == "edge/acme")
    here = Path(acme.path) / "acme.json"
    assert not here.exists()  # nothing on the manager: the certificates are on the edge node only
    on_node = tmp_path / "edge-node" / acme.path.lstrip("/") / "acme.json"
    _acme_with_certificate(on_node, "git.example.com", dt.datetime(2031, 5, 17, 12, 0, tzinfo=dt.UTC))
    stored = json.loads(on_node.read_text())
    stored["le"]["Account"] = {"Email": "a@example.com", "PrivateKey": "c2VjcmV0LWFjY291bnQta2V5"}
    stored["le"]["Certificates"][0]["key"] = "c2VjcmV0LWNlcnQta2V5"
    on_node.write_text(json.dumps(stored, indent=1))
    lab.swarm.node_root = tmp_path / "edge-node"
    lab.swarm.nodes_list = [node("nas", labels={"homelab.storage": "true", "homelab.edge": "true"})]
    engine = SwarmEngine(lab.swarm, lab.docker)
    text = engine.read_file(plan, here)
    assert text is not None and "c2VjcmV0" not in text  # the private keys stayed on the node
    assert json.loads(text)["le"]["Certificates"][0]["key"] == ""
    lab.up()
    rows = {f"{r.stack}/{r.service}": r for r in engine.status(plan)}
    assert rows["dev/gitea"].cert_expiry == "2031-05-17"
    assert lab.swarm.jobs[-1][2] == ("node.labels.homelab.edge == true",)  # read where the edge runs
    names = {r.name: r for r in statuses(plan, read=lambda path: engine.read_file(plan, path))}
    assert names["git.example.com"].expires.startswith("2031-05-17")
    assert engine.read_file(plan, here.with_name("missing.json")) is None


def test_doctor_checks_acme_json_on_the_edge_node(lab: Lab, tmp_path: Path) -> None:
    """Nothing on the manager; on the edge node 0600, then 0644, then a folder (a bind source Docker made)."""
    from functools import partial

    from homelab import doctor
    from homelab.engine.swarm_engine import SwarmEngine

    plan, _, _ = lab.plan()
    acme = next(d for d in plan.datasets if d.key == "edge/acme")
    assert not (Path(acme.path) / "acme.json").exists()
    on_node = tmp_path / "edge-node" / acme.path.lstrip("/") / "acme.json"
    on_node.parent.mkdir(parents=True)
    on_node.write_text("{}")
    on_node.chmod(0o600)
    lab.swarm.node_root = tmp_path / "edge-node"
    lab.swarm.nodes_list = [node("nas", labels={"homelab.storage": "true", "homelab.edge": "true"})]
    state_of = partial(SwarmEngine(lab.swarm, lab.docker).file_state, plan)
    check = next(doctor._acme(plan, state_of))
    assert (check.level, check.detail) == ("ok", f"{acme.path}/acme.json: regular file, 0600")
    assert lab.swarm.jobs[-1][2] == ("node.labels.homelab.edge == true",)  # asked on the edge node
    on_node.chmod(0o644)
    assert next(doctor._acme(plan, state_of)).detail == f"{acme.path}/acme.json has mode 0644; Traefik needs 0600"
    on_node.unlink()
    on_node.mkdir()
    assert next(doctor._acme(plan, state_of)).level == "fail"
    lab.swarm.job_error = "pending: no suitable node (1 node not available)"
    check = next(doctor._acme(plan, state_of))
    assert check.level == "fail" and "no suitable node" in check.detail, check


def test_a_file_on_a_node_that_is_down_is_not_waited_for(lab: Lab) -> None:
    """`status` and `certs` say at once that the edge node is down: no job that would wait out its timeout."""
    from homelab.engine.swarm_engine import SwarmEngine

    plan, _, _ = lab.plan()
    acme = next(d for d in plan.datasets if d.key == "edge/acme")
    lab.swarm.nodes_list = [
        node("nas", labels={"homelab.storage": "true"}),
        node("edge", id="n-edge", role="worker", state="down", labels={"homelab.edge": "true"}),
    ]
    with pytest.raises(OSError, match="cannot read it on its node: node edge is down, active"):
        SwarmEngine(lab.swarm, lab.docker).read_file(plan, Path(acme.path) / "acme.json")
    assert lab.swarm.jobs == []
