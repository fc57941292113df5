"""engine: swarm plan/apply against the recording swarm fake (tests/fakes/swarm.py): what `up` decides per
service, what it deploys, how the gate reads rollbacks and pending tasks; down, status, nodes, doctor."""

from __future__ import annotations

from pathlib import Path

import pytest

from homelab.config.loader import load
from homelab.engine import swarm as converge
from homelab.engine import swarm_state as state
from homelab.engine.health import ApplyFailed
from homelab.project import render_project
from tests.fakes.docker import FakeDocker, container
from tests.fakes.swarm import FakeSwarm, node
from tests.fakes.zfs import FakeZfs

STACKS = ["edge", "dev"]


class Lab:
    def __init__(self, config: Path, out: Path) -> None:
        self.config, self.out = config, out
        self.swarm, self.docker = FakeSwarm(), FakeDocker()

    def plan(self, stacks: list[str] = STACKS) -> tuple:  # type: ignore[type-arg]
        result = render_project(load(self.config), self.out)
        wanted = converge.desired(result.plan, self.out, result.rendering.files, stacks)
        return result.plan, wanted, converge.converge(result.plan, wanted, self.swarm)

    def up(self, stacks: list[str] = STACKS, timeout: float = 5) -> dict[str, str]:
        plan, wanted, convergence = self.plan(stacks)
        if convergence.changed:
            converge.apply(convergence, wanted, plan, self.swarm, self.docker, timeout=timeout, zfs=FakeZfs())
        return {f"{a.stack}/{a.service}": a.action for a in convergence.actions()}

    def versions(self) -> dict[str, int]:
        return {s.name: s.version for s in self.swarm.services()}

    def edit(self, old: str, new: str) -> None:
        self.config.write_text(self.config.read_text().replace(old, new, 1))


@pytest.fixture
def lab(example_config: Path, tmp_path: Path) -> Lab:
    text = example_config.read_text().replace("version: 1\n", "version: 1\nengine: swarm\n", 1)
    example_config.write_text(text.replace("mountpoint: /tank/homelab", f"mountpoint: {tmp_path / 'tank'}"))
    return Lab(example_config, tmp_path / "stacks")


def test_first_up_creates_then_a_second_up_touches_nothing(lab: Lab) -> None:
    assert set(lab.up().values()) == {"create"}
    assert [c[1] for c in lab.swarm.calls if c[0] == "deploy"] == ["homelab-edge", "homelab-dev"]
    before, deploys = lab.versions(), len(lab.swarm.deployed_files)
    assert set(lab.up().values()) == {"leave"}
    assert lab.versions() == before and len(lab.swarm.deployed_files) == deploys


def test_one_option_deploys_exactly_that_service(lab: Lab) -> None:
    lab.up()
    before = lab.versions()
    lab.edit("  gitea:\n", "  gitea:\n    resources: {memory: 700m}\n")
    actions = lab.up()
    assert [k for k, v in actions.items() if v != "leave"] == ["dev/gitea"]
    assert list(lab.swarm.deployed_files[-1]["services"]) == ["gitea"]  # the file deployed names only it
    after = lab.versions()
    assert {k for k in after if after[k] != before[k]} == {"homelab-dev_gitea"}


def test_a_changed_secret_rolls_the_services_using_it_and_old_versions_are_pruned(lab: Lab) -> None:
    lab.up()
    old = set(lab.swarm.svc["homelab-dev_gitea"].secrets)
    (lab.out / "secrets" / "gitea_admin_password").write_text("another-value-entirely\n")
    actions = lab.up()
    assert [k for k, v in actions.items() if v != "leave"] == ["dev/gitea"]
    new = set(lab.swarm.svc["homelab-dev_gitea"].secrets)
    changed = new - old
    assert len(changed) == 1 and next(iter(changed)).startswith("gitea_admin_password-")
    assert old <= set(lab.swarm.objects("secret", "homelab-dev"))  # the previous spec (a rollback) names them
    (lab.out / "secrets" / "gitea_admin_password").write_text("and-a-third-value\n")
    lab.up()
    assert not (old - new) & set(lab.swarm.objects("secret", "homelab-dev"))  # two versions back: pruned


def test_the_single_node_is_labelled_once(lab: Lab) -> None:
    state.label_single_node(lab.swarm, lambda _m: None)
    state.label_single_node(lab.swarm, lambda _m: None)
    assert [c for c in lab.swarm.calls if c[0] == "label_node"] == [
        ("label_node", "n-nas", {"homelab.storage": "true", "homelab.edge": "true"})
    ]
    two = FakeSwarm(node("a"), node("b", id="n-b"))
    state.label_single_node(two, lambda _m: None)
    assert not two.calls  # with more nodes the owner chooses


def test_a_rolled_back_update_fails_up_naming_the_reason(lab: Lab) -> None:
    lab.up()
    lab.swarm.rollback["gitea"] = "update paused due to failure or early termination of task abc"
    lab.edit("  gitea:\n", "  gitea:\n    resources: {memory: 700m}\n")
    with pytest.raises(ApplyFailed) as caught:
        lab.up()
    assert "gitea: the update failed and Swarm rolled it back (update paused due to failure" in str(caught.value)


def test_a_task_no_node_can_take_is_reported_pending_with_the_reason(lab: Lab) -> None:
    reason = "no suitable node (scheduling constraints not satisfied on 1 node)"
    lab.swarm.pending["gitea"] = reason
    with pytest.raises(ApplyFailed) as caught:
        lab.up(timeout=0)
    assert f"stack dev: gitea: pending: {reason}" in str(caught.value)
    plan, _, _ = lab.plan()
    rows = {f"{r.stack}/{r.service}": r for r in state.status(plan, lab.swarm)}
    assert (rows["dev/gitea"].state, rows["dev/gitea"].reason) == ("pending", f"pending: {reason}")
    assert rows["edge/traefik"].state == "running" and rows["edge/traefik"].health == "healthy"


def test_compose_projects_are_taken_down_first_and_a_removed_service_is_removed(lab: Lab) -> None:
    lab.docker.running = [container("homelab-dev", "gitea")]
    lab.up()
    assert ("down", "homelab-dev") in [c[:2] for c in lab.docker.calls]
    lab.edit("  rstudio:\n", "  rstudio:\n    enabled: false\n")
    actions = lab.up()
    assert actions["dev/rstudio"] == "remove"
    assert ("remove_services", ["homelab-dev_rstudio"]) in lab.swarm.calls


def test_leaving_swarm_removes_the_edge_last(lab: Lab) -> None:
    lab.up()
    converge.leave_swarm(lab.swarm, lab.out, None, lambda _m: None)  # the engine is compose now
    assert [c[1] for c in lab.swarm.calls if c[0] == "remove_stack"] == ["homelab-dev", "homelab-edge"]


def test_down_removes_the_stacks_last_first(lab: Lab) -> None:
    lab.up()
    assert (lab.out / converge.SWARM_MARK).is_file()  # compose `up` will know to take the stacks down
    done = converge.leave_swarm(lab.swarm, lab.out, STACKS, lambda _m: None)
    assert done == ["dev", "edge"] and not lab.swarm.services()
    assert not (lab.out / converge.SWARM_MARK).exists()


def test_down_removes_a_network_a_stopping_task_still_used(lab: Lab, monkeypatch: pytest.MonkeyPatch) -> None:
    """`docker stack rm` exits 1 when a task being stopped still uses the stack's network (seen on the
    real engine in tests/swarm/test_swarm_all_apps.py): homelab asks again once the tasks are gone."""
    monkeypatch.setattr(converge, "POLL_SECONDS", 0)
    lab.up()
    lab.swarm.busy_network["homelab-dev"] = 2
    assert converge.leave_swarm(lab.swarm, lab.out, STACKS, lambda _m: None) == ["dev", "edge"]
    assert [c[1] for c in lab.swarm.calls if c[0] == "remove_stack"] == ["homelab-dev"] * 3 + ["homelab-edge"]


def test_a_stack_swarm_will_not_remove_is_an_error_naming_it(lab: Lab, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(converge, "POLL_SECONDS", 0)
    lab.up()
    lab.swarm.busy_network["homelab-dev"] = 10**9
    with pytest.raises(ApplyFailed) as caught:
        converge.remove_stack(lab.swarm, "homelab-dev", timeout=0.05)
    assert "stack homelab-dev still there after 0s (Failed to remove network homelab-dev_default" in str(caught.value)


def test_nodes_say_what_runs_where(lab: Lab) -> None:
    lab.up()
    (row,) = state.nodes(lab.swarm)
    assert row.hostname == "nas" and "dev/gitea" in row.services and "edge/traefik" in row.services


def test_doctor_checks_swarm_state_labels_and_ports(lab: Lab) -> None:
    plan, _, _ = lab.plan()
    lab.swarm.local_state = "inactive"
    assert [(c.level, c.name) for c in state.checks(plan, lab.swarm)] == [("fail", "swarm")]
    lab.swarm.local_state = "active"
    storage = {"homelab.storage": "true"}
    lab.swarm.nodes_list = [node("a", labels=storage), node("b", id="n-b", role="worker", address="10.0.0.2")]
    reached: list[tuple[str, int]] = []

    def connect(address: str, port: int) -> None:
        reached.append((address, port))
        if port == 7946:
            raise OSError("connection refused")

    found = {(c.level, c.name, c.detail) for c in state.checks(plan, lab.swarm, connect)}
    assert ("fail", "label homelab.edge", "no node has it: the edge (80/443) stay pending (docs/swarm.md)") in found
    assert ("fail", "node b", "10.0.0.2:7946/tcp not reachable (connection refused)") in found
    assert reached == [("10.0.0.2", 7946)]  # a worker has no 2377
    assert any(level == "warn" and name == "overlay ports" for level, name, _ in found)


@pytest.mark.parametrize(
    ("subnet", "level", "detail"),
    [
        ("172.18.0.0/16", "ok", "172.18.0.0/16: inside edge.lan_cidrs"),
        ("192.168.208.0/20", "warn", "192.168.208.0/20 is outside edge.lan_cidrs: LAN-only routes refuse"),
        ("172.30.0.0/16", "fail", "172.30.0.0/16 overlaps edge.proxy_subnet 172.30.250.0/24"),
    ],
)
def test_doctor_checks_the_gateway_bridge_against_the_lan_and_the_proxy_subnet(
    lab: Lab, subnet: str, level: str, detail: str
) -> None:
    """The two ways docker_gwbridge's pool (the engine's next free one at `swarm init`) bit the swarm tests:
    a LAN-only route refused the node's own requests (192.168.x), the proxy network's pool overlapped."""
    lab.edit("lan_cidrs: [192.168.1.0/24]", "lan_cidrs: [192.168.1.0/24, 172.16.0.0/12]")
    plan, _, _ = lab.plan()
    lab.swarm.network_subnets["docker_gwbridge"] = [subnet]
    (check,) = [c for c in state.checks(plan, lab.swarm) if c.name == "docker_gwbridge"]
    assert check.level == level and check.detail.startswith(detail), check


def test_doctor_checks_the_edge_ports_on_the_edge_node(lab: Lab) -> None:
    plan, _, _ = lab.plan()
    edge = node("edge", id="n-edge", role="worker", address="10.0.0.9", labels={"homelab.edge": "true"})
    lab.swarm.nodes_list = [node("a", labels={"homelab.storage": "true"}), edge]
    answers = {80: None, 443: ConnectionRefusedError("refused")}

    def connect(address: str, port: int) -> None:
        if address == "10.0.0.9":
            failure = answers.get(port, TimeoutError("timed out"))
            if failure is not None:
                raise failure

    found = [(c.level, c.detail) for c in state.checks(plan, lab.swarm, connect) if c.name == "edge node edge"]
    assert ("ok", "10.0.0.9:80/tcp answers") in found
    assert ("ok", "10.0.0.9:443/tcp free (nothing answers)") in found
    ssh = plan.config.apps.gitea.ssh_port
    assert ("fail", f"10.0.0.9:{ssh}/tcp not reachable (timed out)") in found
