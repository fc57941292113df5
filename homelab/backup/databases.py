"""The Postgres servers of the stacks, through the engine (`compose exec` in their containers): the dump a
recovery bundle carries, the sentinel row a run writes and a recovery reads back, and loading a dump into
a server whose data folder could not start (homelab.backup.recover).

Servers are found as upgrades find them (homelab.upgrade.journal.stack_dumps: a service mounting a dataset as
PGDATA). The sentinel row is a table of homelab's own, `homelab_sentinel (run, written)`, in the app's
database: written through Postgres like the app's own rows, so it is in the pages the snapshot holds and
in the dump.
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from homelab.errors import CommandFailed
from homelab.layout import STACKS_DIR, project_name
from homelab.plan_model import Plan
from homelab.runtime.docker import Engine
from homelab.upgrade.journal import Dump, stack_dumps

TIMEOUT = 3600
TABLE = "homelab_sentinel"  # the sentinel rows (WRITE_ROW, READ_ROW)
_MAJOR = re.compile(r"^postgres:(\d+)")


@dataclass(frozen=True)
class Server:
    stack: str
    dump: Dump
    directory: Path  # the stack's folder (compose's project directory)

    @property
    def project(self) -> str:
        return project_name(self.stack)

    def psql(self, *extra: str) -> list[str]:
        base = ["psql", "--username", self.dump.user, "--dbname", self.dump.database, "--no-password"]
        return [*base, "--no-psqlrc", "--quiet", "--set", "ON_ERROR_STOP=1", *extra]


def servers(plan: Plan, base_dir: Path) -> list[Server]:
    return [
        Server(stack.name, dump, base_dir / STACKS_DIR / stack.name)
        for stack in plan.stacks.values()
        for dump in stack_dumps(stack)
    ]


def running(engine: Engine, server: Server) -> bool:
    return any(c.service == server.dump.service and c.running for c in engine.containers([server.project]))


def dump_to(engine: Engine, server: Server, dest: Path) -> None:
    argv = ["pg_dump", "--username", server.dump.user, "--dbname", server.dump.database, "--no-password"]
    engine.exec_to_file(server.project, server.directory, server.dump.service, argv, dest, timeout=TIMEOUT)


def _sql(engine: Engine, server: Server, sql: str, *extra: str) -> str:
    with tempfile.NamedTemporaryFile("w", suffix=".sql") as handle:
        handle.write(sql)
        handle.flush()
        return engine.exec_from_file(
            server.project,
            server.directory,
            server.dump.service,
            server.psql(*extra),
            Path(handle.name),
            timeout=TIMEOUT,
        )


# the value is a psql variable, quoted by psql (:'run'), never spliced into the SQL text
WRITE_ROW = """CREATE TABLE IF NOT EXISTS homelab_sentinel
  (run text PRIMARY KEY, written timestamptz NOT NULL DEFAULT now());
INSERT INTO homelab_sentinel (run) VALUES (:'run') ON CONFLICT DO NOTHING;
"""
READ_ROW = "SELECT run FROM homelab_sentinel WHERE run = :'run';\n"


def write_row(engine: Engine, server: Server, value: str) -> None:
    _sql(engine, server, WRITE_ROW, "--set", f"run={value}")


def read_row(engine: Engine, server: Server, value: str) -> str | None:
    """The sentinel row's value as the server gives it back; None when it has no such row (or table)."""
    try:
        out = _sql(engine, server, READ_ROW, "--set", f"run={value}", "--tuples-only", "--no-align")
    except CommandFailed:
        return None
    return out.strip() or None


def load(engine: Engine, server: Server, dump: Path) -> None:
    """Feed a pg_dump to the (fresh, empty) server in one transaction: all of it loads or nothing does."""
    engine.exec_from_file(
        server.project,
        server.directory,
        server.dump.service,
        server.psql("--single-transaction"),
        dump,
        timeout=TIMEOUT,
    )


def pages_start(folder: Path, image: str) -> bool:
    """Whether a restored PGDATA can start under the image: it is a cluster (PG_VERSION), of the image's
    major version when the image is the postgres one (a dump is what another major starts from)."""
    version = folder / "PG_VERSION"
    if not version.is_file():
        return False
    major = _MAJOR.match(image)
    return major is None or version.read_text().strip() == major.group(1)
