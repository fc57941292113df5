"""Rollbacks never discard a write without asking and never leave a stack down: on the real engine, zfs-fuse
and (for the ones about writes) real PostgreSQL beside the app's files.

The app is test_upgrade's stand-in (v1 writes `format-1` into /data/db, v2-* rewrite it), with a few more
versions built here: `slow` (v1 whose healthcheck, once /data/slow exists, passes 9 s after it starts;
start_period 60 s), `crash` (exits 3 at once) and `g3`..`g6` (good versions rewriting the first line to
`format-N`). The Postgres service and its stand-in are test_upgrade_dump's.
"""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import standins
from test_upgrade import REPO, RUN, STACK, Box, box, versions  # noqa: F401 - fixtures
from test_upgrade_dump import PgBox, pgbox, postgres  # noqa: F401 - fixtures

from homelab.backup import Context, context, run_backup
from homelab.backup.snapshots import Snapshots
from homelab.config.loader import load
from homelab.errors import HomelabError
from homelab.plan import build_plan
from homelab.runtime.zfs import ZfsCli
from homelab.upgrade import journal as upgrade_journal
from homelab.upgrade import settle as upgrade_settle
from homelab.upgrade import undo as upgrade_undo
from tests.backup.conftest import KEY
from tests.fakes.rclone import FakeRclone
from tests.storage.zfs import make_pool, write_config, zfs_daemon  # noqa: F401 - fixtures

pytestmark = [pytest.mark.docker, pytest.mark.real]

HERE = Path(__file__).resolve().parent
MORE = {
    "slow": (
        "[ -f /data/db ] || printf 'format-1\\nrecord a\\n' > /data/db\ndate +%s > /tmp/started\n",
        'grep -q "^format-1" /data/db && '
        "{ [ ! -f /data/slow ] || [ $(( $(date +%s) - $(cat /tmp/started) )) -ge 9 ]; }",
    ),
    "crash": ("echo 'FATAL: cannot read /data/db as format-1' >&2\nexit 3\n", "exit 1"),
    **{
        f"g{n}": (f"sed -i 's/^format-[0-9]*/format-{n}/' /data/db\n", f"grep -q '^format-{n}' /data/db")
        for n in range(3, 7)
    },
}
ROW = "after the upgrade"


@pytest.fixture(scope="module")
def more(versions, tmp_path_factory) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """test_upgrade's versions and this module's, in the one dict the boxes read."""
    work = tmp_path_factory.mktemp("rollback-images")
    for version, (start, health) in MORE.items():
        root = standins.Rootfs(work / f"{version}.tar")
        root.busybox()
        root.file("entry", data=f"#!/bin/sh\nset -e\n{start}{RUN}".encode())
        root.file("health", data=f"#!/bin/sh\n{health}\n".encode())
        versions[version] = root.import_as(f"{REPO}:{version}", 'ENTRYPOINT ["/entry"]')
    return versions


def _until(what: Callable[[], bool], seconds: float = 90) -> None:
    deadline = time.monotonic() + seconds
    while not what():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.5)


def _healthy(box: Box, version: str) -> bool:
    try:
        return box.running() == (box.versions[version], "healthy")
    except ValueError:  # no container (yet)
        return False


def _write(box: PgBox) -> None:
    """What a user does between two commands: a file, and a row."""
    (box.data / "after.txt").write_text("written by the user\n")
    box.sql("-c", "INSERT INTO notes VALUES (2, 'after the upgrade')")  # ROW


def _kept(box: PgBox) -> None:
    assert (box.data / "after.txt").read_text() == "written by the user\n"
    assert box.sql("-c", "SELECT body FROM notes ORDER BY id") == f"before\n{ROW}"


def _start(box: PgBox, version: str) -> None:
    box.up(version)
    box.sql("-c", "CREATE TABLE notes (id int PRIMARY KEY, body text); INSERT INTO notes VALUES (1, 'before')")


# (1) -----------------------------------------------------------------------------------------------------


def test_a_rollback_waits_for_the_previous_versions_start_and_a_later_write_survives_the_next_up(
    more: dict[str, str], pgbox: PgBox
) -> None:
    pgbox.start_periods["slow"] = "60s"
    _start(pgbox, "slow")
    (pgbox.data / "slow").touch()  # from its next start on (the snapshot holds it: the rollback's start)
    # the upgrade's --timeout (6 s) is shorter than the previous version's start (9 s): the rollback waits
    # as long as that version's healthcheck allows (start_period), not the upgrade's timeout
    with pytest.raises((HomelabError, TimeoutError)) as caught:
        pgbox.up("v2-bad", timeout=6)
    _until(lambda: _healthy(pgbox, "slow"))
    _write(pgbox)
    try:
        pgbox.up("slow")  # the next up
    except HomelabError as refused:  # allowed, if it says why and kept the write
        assert "rollback of" in str(refused), refused
    _kept(pgbox)
    assert isinstance(caught.value, upgrade_journal.RolledBack), caught.value  # not cut short at all
    assert _healthy(pgbox, "slow") and upgrade_journal.unsettled(pgbox.out) == []


# (2) -----------------------------------------------------------------------------------------------------

DRIVER = (
    "import json, sys; from pathlib import Path; from test_upgrade_dump import PgBox; a = json.loads(sys.argv[1]); "
    "PgBox(Path(a[0]), a[1], Path(a[2]), a[3], pg_dataset=a[5], pg_data=Path(a[6]), image=a[7]).up(a[4])"
)


def _kill_at(box: PgBox, version: str, hold: str) -> None:
    """An `up` to `version` in its own process group, SIGKILLed (compose included) at the journal point `hold`."""
    marker = box.out.parent / f"held-{time.monotonic_ns()}"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), str(HERE.parent.parent)]),
        upgrade_journal.HOLD_ENV: f"{hold}:{marker}",
    }
    log = box.out.parent / "killed.log"
    args = [str(box.out), box.dataset, str(box.data), box.versions, version]
    args += [box.pg_dataset, str(box.pg_data), box.pg_image]
    with log.open("wb") as output:
        proc = subprocess.Popen(
            [sys.executable, "-c", DRIVER, json.dumps(args)],
            env=env,
            stdout=output,
            stderr=output,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 180
        while not marker.exists():
            assert proc.poll() is None, f"the up ended before the kill point:\n{log.read_text()}"
            assert time.monotonic() < deadline, f"kill point never reached:\n{log.read_text()}"
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)


def test_killed_right_after_the_rollbacks_compose_a_later_write_survives_the_next_up(
    more: dict[str, str], pgbox: PgBox
) -> None:
    _start(pgbox, "v1")
    _kill_at(pgbox, "v2-bad", "rollback-composed")
    (line,) = upgrade_journal.unsettled(pgbox.out)  # what `status` prints, exiting 1
    assert line.startswith(f"rollback of {STACK} unfinished")
    _until(lambda: _healthy(pgbox, "v1"))
    _write(pgbox)
    with pytest.raises(upgrade_settle.Held, match="interrupted rollback"):
        pgbox.up("v1")  # the next up finishes the rollback: the previous version's start, not its data again
    _kept(pgbox)
    assert _healthy(pgbox, "v1") and upgrade_journal.unsettled(pgbox.out) == []


# (3) -----------------------------------------------------------------------------------------------------


def test_rollback_by_hand_after_writes_refuses_unasked_and_keeps_them_in_a_safety_snapshot(
    more: dict[str, str], pgbox: PgBox, tmp_path: Path
) -> None:
    from homelab.upgrade.restore import snapshot_folder  # here: the module collects on code without it

    _start(pgbox, "v1")
    pgbox.up("v2-good")
    _write(pgbox)
    asked: list[str] = []
    with pytest.raises(upgrade_journal.UpgradeRefused) as caught:
        upgrade_undo.rollback(
            pgbox.out, pgbox.docker, pgbox.zfs, STACK, timeout=60, progress=pgbox.said.append,
            decide=lambda loss: asked.append(loss) or False,
        )  # fmt: skip
    message = str(caught.value)
    assert caught.value.exit_code == 5 and "--discard-writes" in message
    assert f"{pgbox.dataset}: " in message and " bytes in " in message, message
    assert "db: database nextcloud has changed since the upgrade" in message
    assert asked and asked[0] in message
    assert _healthy(pgbox, "v2-good")  # nothing stopped
    _kept(pgbox)

    record = upgrade_undo.rollback(
        pgbox.out, pgbox.docker, pgbox.zfs, STACK, timeout=60, progress=pgbox.said.append, decide=lambda _l: True
    )
    assert _healthy(pgbox, "v1") and (pgbox.data / "db").read_bytes().startswith(b"format-1")
    assert not (pgbox.data / "after.txt").exists()
    assert pgbox.sql("-c", "SELECT count(*) FROM notes") == "1"
    assert record.safety and record.safety.startswith("homelab-safety-")
    with snapshot_folder(pgbox.zfs, pgbox.dataset, record.safety, tmp_path / "read") as kept:
        assert (kept / "after.txt").read_text() == "written by the user\n"
    with snapshot_folder(pgbox.zfs, pgbox.pg_dataset, record.safety, tmp_path / "read") as kept:
        pages = [p.read_bytes() for p in (kept / "base").rglob("*") if p.is_file()]
        assert any(ROW.encode() in page for page in pages)  # the row, in the stopped server's heap


def _on_a_terminal(argv: list[str], answer: bytes) -> tuple[int, str]:
    """Run a homelab command with a pseudo-terminal as stdin/stdout/stderr; answer its yes/no question."""
    master, slave = os.openpty()
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, start_new_session=True)
    os.close(slave)
    out, answered, deadline = b"", False, time.monotonic() + 180
    try:
        while proc.poll() is None or select.select([master], [], [], 0)[0]:
            assert time.monotonic() < deadline, out.decode(errors="replace")
            if not select.select([master], [], [], 0.2)[0]:
                continue
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: the command ended and closed the terminal
                break
            out += chunk
            if not answered and out.rstrip().endswith(b"[y/N]:"):
                os.write(master, answer + b"\n")
                answered = True
    finally:
        os.close(master)
    return proc.wait(60), out.decode(errors="replace").replace("\r\n", "\n")


def test_rollback_on_a_real_terminal_asks_and_does_nothing_on_no_then_rolls_back_on_yes(
    more: dict[str, str], box: Box, example_config: Path
) -> None:
    box.up("v1")
    box.up("v2-good")
    (box.data / "upload").write_bytes(b"written through v2-good\n")
    argv = [sys.executable, "-m", "homelab", "rollback", STACK, "--config", str(example_config), "--out", str(box.out)]
    code, said = _on_a_terminal(argv, b"n")
    assert code == 5, said
    assert f"rolling back {STACK} discards what was written since its upgrade:" in said
    assert f"{box.dataset}: " in said and "roll back anyway (a safety snapshot keeps it)? [y/N]:" in said, said
    assert _healthy(box, "v2-good") and (box.data / "upload").exists()
    assert upgrade_journal.list_records(box.out)[-1].state == "upgraded"
    code, said = _on_a_terminal(argv, b"y")
    assert code == 0, said
    assert f"rollback: {STACK} is back on the version before " in said
    assert _healthy(box, "v1") and not (box.data / "upload").exists()
    (record,) = upgrade_journal.list_records(box.out)  # v1 was a first start, v2-good the one upgrade
    assert record.state == "rolled-back" and record.safety and record.safety in box.zfs.snapshots(box.dataset)


# (4) -----------------------------------------------------------------------------------------------------


def test_rollback_with_a_newer_backup_snapshot_succeeds_keeps_it_and_says_so(more: dict[str, str], box: Box) -> None:
    box.up("v1")
    box.up("v2-good")
    backup = "homelab-20260101T000000Z"  # the name `backup run` gives its snapshot
    box.zfs.snapshot(box.dataset, backup)
    box.said.clear()
    upgrade_undo.rollback(
        box.out, box.docker, box.zfs, STACK, timeout=60, progress=box.said.append, decide=lambda _l: True
    )
    assert _healthy(box, "v1") and (box.data / "db").read_bytes().startswith(b"format-1")
    assert backup in box.zfs.snapshots(box.dataset)
    assert any(f"newer snapshots kept (none destroyed): @{backup}" in line for line in box.said), box.said


# (5) -----------------------------------------------------------------------------------------------------


def test_five_upgrades_then_two_rollbacks_each_leave_a_running_stack(more: dict[str, str], box: Box) -> None:
    box.up("v1")
    for version in ("v2-good", "g3", "g4", "g5", "g6"):
        box.up(version)
    for back_to in ("g5", "g4"):
        upgrade_undo.rollback(
            box.out, box.docker, box.zfs, STACK, timeout=60, progress=box.said.append, decide=lambda _l: True
        )
        assert _healthy(box, back_to)
        assert (box.data / "db").read_text().startswith(f"format-{back_to[1]}")
    states = [r.state for r in upgrade_journal.list_records(box.out)]
    assert states == ["upgraded"] * 3 + ["rolled-back"] * 2


# (6) -----------------------------------------------------------------------------------------------------


@pytest.fixture
def backed_box(engine, more, make_pool, tmp_path, monkeypatch) -> Iterator[tuple[Box, Context]]:  # type: ignore[no-untyped-def]
    """test_upgrade's app on the dataset a backup config names (rstudio's home), with that backup's context
    (the real snapshots on zfs-fuse; the remote rclone's recording fake)."""
    monkeypatch.setenv("HOMELAB_COMPOSE", engine["HOMELAB_COMPOSE"])
    state = tmp_path / "backup-state"
    monkeypatch.setenv("HOMELAB_BACKUP_STATE", str(state))
    pool = make_pool("128M")
    mnt = Path(ZfsCli().get(pool, "mountpoint"))
    config = write_config(
        tmp_path / "cfg", pool=pool, mountpoint=mnt / "homelab", apps={"rstudio"},
        remote_dir=tmp_path / "unused", backup={"datasets": [KEY]},
    )  # fmt: skip
    loaded = load(config)
    (d,) = [d for d in build_plan(loaded).datasets if d.key == KEY]
    subprocess.run(["zfs", "create", "-p", d.name], check=True, capture_output=True)
    assert ZfsCli().get(d.name, "mountpoint") == d.path
    ctx = context(loaded, state_dir=state, rclone=FakeRclone(tmp_path / "remote"), snapshots=Snapshots(ZfsCli()))
    yield Box(tmp_path / "stacks", d.name, Path(d.path), more), ctx
    from dockerlab import remove_homelab_resources

    remove_homelab_resources()


def test_a_backup_started_during_the_health_wait_waits_for_the_automatic_rollback(
    backed_box: tuple[Box, Context],
) -> None:
    box, ctx = backed_box
    box.up("v1")
    before = (box.data / "db").read_bytes()
    said: list[str] = []
    backup: list[object] = []

    def start_backup_in_the_health_wait() -> None:
        _until(lambda: [r.state for r in upgrade_journal.list_records(box.out)] == ["applying"])
        said.append(f"started at {time.monotonic()}")
        backup.append(run_backup(ctx, say=said.append))

    thread = threading.Thread(target=start_backup_in_the_health_wait)
    thread.start()
    try:
        with pytest.raises(upgrade_journal.RolledBack):
            box.up("v2-bad")
        rolled_back = time.monotonic()
    finally:
        thread.join(120)
    assert _healthy(box, "v1") and (box.data / "db").read_bytes() == before
    assert any("waiting for the upgrade of" in line for line in said), said
    assert backup, said  # it ran once the rollback was done
    (record,) = upgrade_journal.list_records(box.out)
    assert record.state == "rolled-back" and rolled_back > float(said[0].split()[-1])


# (smaller) -------------------------------------------------------------------------------------------------


def test_a_version_that_exits_at_once_is_reported_with_its_exit_code_and_last_lines(
    more: dict[str, str], box: Box
) -> None:
    box.restarted.add("crash")  # as the catalog runs it: the engine restarts it, the health check never runs
    box.up("v1")
    with pytest.raises(upgrade_journal.RolledBack) as caught:
        box.up("crash", timeout=10)
    first = str(caught.value).splitlines()[0]
    assert re.fullmatch(
        rf"{STACK}: upgrade rolled back: app exited with code 3 \(restarted \d+ times\); "
        r"last output: FATAL: cannot read /data/db as format-1( \| FATAL: cannot read /data/db as format-1)*",
        first,
    ), str(caught.value)
    assert _healthy(box, "v1")
