"""The Postgres dump before an upgrade's snapshot, on the real engine, zfs-fuse and a real PostgreSQL.

The db stand-in is REAL PostgreSQL: this machine's Debian postgresql-15 binaries (the catalog pins
postgres:16.6-alpine, which cannot be pulled here), laid out as the upstream image has them
(docker-library/postgres 16/alpine3.20: binaries on PATH in /usr/local/bin, PGDATA=/var/lib/postgresql/data,
user postgres 70:70, ENTRYPOINT docker-entrypoint.sh CMD postgres), with an entrypoint doing the steps of
upstream's docker-entrypoint.sh this test relies on (ENTRYPOINT below). The app is test_upgrade's v1/v2 stand-in.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import standins
from test_upgrade import STACK, Box, versions  # noqa: F401 - fixture

from homelab.plan_model import Dataset, Mount, Service
from homelab.upgrade import journal as upgrade_journal
from homelab.upgrade import run as upgrade
from homelab.upgrade import undo as upgrade_undo
from tests.conftest import missing
from tests.storage.zfs import make_pool, zfs_daemon  # noqa: F401 - fixtures

pytestmark = [pytest.mark.docker, pytest.mark.real]

PG = "/usr/lib/postgresql/15"
PROGRAMS = ("postgres", "initdb", "pg_ctl", "psql", "pg_dump", "pg_isready", "createdb")
# the steps of upstream's docker-entrypoint.sh (16/alpine3.20 at 960ebdf "Update 16 to 16.6") this stand-in
# needs, in busybox sh: docker_setup_env first, as root: file_env reads POSTGRES_PASSWORD_FILE (a root-only
# secret), exports POSTGRES_PASSWORD and unsets the _FILE variable, so the re-run as postgres never reads
# the file; then, as root, own PGDATA and the socket folder and re-run as postgres (gosu there, su here); on
# an empty PGDATA: initdb as POSTGRES_USER with the password (local connections: initdb's default, trust),
# host connections by password, listen on all addresses (the Dockerfile's edit of postgresql.conf.sample), a socket-only
# server to CREATE DATABASE POSTGRES_DB; then exec postgres
ENTRYPOINT = b"""#!/bin/sh
set -e
if [ -n "$POSTGRES_PASSWORD_FILE" ]; then
  export POSTGRES_PASSWORD="$(cat "$POSTGRES_PASSWORD_FILE")"
  unset POSTGRES_PASSWORD_FILE
fi
export POSTGRES_USER="${POSTGRES_USER:-postgres}"
export POSTGRES_DB="${POSTGRES_DB:-$POSTGRES_USER}"
if [ "$(id -u)" = 0 ]; then
  mkdir -p "$PGDATA" /var/run/postgresql
  chmod 700 "$PGDATA"; chmod 3775 /var/run/postgresql
  chown -R 70:70 "$PGDATA" /var/run/postgresql
  exec su -p -s /bin/sh postgres -c 'exec "$0" "$@"' "$0" "$@"
fi
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  printf '%s\\n' "$POSTGRES_PASSWORD" > /tmp/pwfile
  initdb --username="$POSTGRES_USER" --pwfile=/tmp/pwfile --no-locale -D "$PGDATA"
  rm -f /tmp/pwfile
  printf '\\nhost all all all scram-sha-256\\n' >> "$PGDATA/pg_hba.conf"
  printf "listen_addresses = '*'\\n" >> "$PGDATA/postgresql.conf"
  pg_ctl -D "$PGDATA" -o "-c listen_addresses='' -p 5432" -w start
  if [ "$POSTGRES_DB" != postgres ]; then
    psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --no-password --dbname postgres \\
      -c "CREATE DATABASE \\"$POSTGRES_DB\\""
  fi
  pg_ctl -D "$PGDATA" -m fast -w stop
fi
exec "$@"
"""


def postgres_image(work: Path) -> str:
    for program in PROGRAMS:
        if not Path(PG, "bin", program).is_file():
            missing(f"PostgreSQL 15 ({PG}/bin/{program}; Debian postgresql-15)")
    root = standins.Rootfs(work / "postgres.tar")
    root.busybox()
    files = {f"{PG}/bin/{p}" for p in PROGRAMS} | {str(p) for p in Path(PG, "lib").glob("*.so")}
    libs = set()
    for path in files:  # each library once (Rootfs.with_libs would add the shared ones again)
        for line in subprocess.run(["ldd", path], capture_output=True, text=True, check=False).stdout.splitlines():
            parts = line.split()
            lib = parts[2] if "=>" in parts and len(parts) >= 3 else parts[0]
            if lib.startswith("/") and Path(lib).exists():
                libs.add(lib)
    for path in sorted(files | libs):
        root.file(path.lstrip("/"), path)
    for program in PROGRAMS:
        root.link(f"usr/local/bin/{program}", f"{PG}/bin/{program}")
    for share in Path("/usr/share/postgresql/15").rglob("*"):
        if share.is_file():
            root.file(str(share).lstrip("/"), share, mode=0o644)
    for zone in ("UTC", "Etc/UTC"):
        root.file(f"usr/share/zoneinfo/{zone}", f"/usr/share/zoneinfo/{zone}", mode=0o644)
    root.file("usr/local/bin/docker-entrypoint.sh", data=ENTRYPOINT)
    root.file(
        "etc/passwd", data=b"root:x:0:0::/root:/bin/sh\npostgres:x:70:70::/var/lib/postgresql:/bin/sh\n", mode=0o644
    )
    root.file("etc/group", data=b"root:x:0:\npostgres:x:70:\n", mode=0o644)
    root.dir("var/run/postgresql", 0o3775)
    return root.import_as(
        f"{standins.PREFIX}/postgres:upgrade",
        'ENTRYPOINT ["docker-entrypoint.sh"]',
        'CMD ["postgres"]',
        f"ENV PGDATA={upgrade_journal.PGDATA} PATH={standins.IMAGE_PATH}",
    )


@pytest.fixture(scope="module")
def postgres(versions, tmp_path_factory) -> str:  # type: ignore[no-untyped-def]
    return postgres_image(tmp_path_factory.mktemp("postgres-image"))


class PgBox(Box):
    """test_upgrade's stack plus a `db` service: Postgres on a dataset of its own, as the catalog's cloud."""

    def __init__(self, *args, pg_dataset: str, pg_data: Path, image: str) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args)
        self.pg_dataset, self.pg_data, self.pg_image = pg_dataset, pg_data, image

    def services(self, version: str) -> tuple[dict[str, Service], list[Dataset]]:
        services, datasets = super().services(version)
        env = {"POSTGRES_USER": "nextcloud", "POSTGRES_DB": "nextcloud"}
        services["db"] = Service(
            "db", self.pg_image, environment=env, mounts=[Mount(str(self.pg_data), upgrade_journal.PGDATA, False)]
        )
        datasets.append(Dataset(STACK, "db", self.pg_dataset, str(self.pg_data), {}, 70, 70, False, "pages"))
        return services, datasets

    def compose(self, version: str) -> dict:  # type: ignore[type-arg]
        document = super().compose(version)
        document["services"]["db"] = {
            "image": self.pg_image,
            # the password as the catalog passes it: a secret file only root may read (0600)
            "environment": {
                "POSTGRES_USER": "nextcloud",
                "POSTGRES_DB": "nextcloud",
                "POSTGRES_PASSWORD_FILE": "/run/secrets/db_password",
            },
            "secrets": ["db_password"],
            "volumes": [f"{self.pg_data}:{upgrade_journal.PGDATA}"],
            "stop_signal": "SIGINT",  # the upstream Dockerfile's STOPSIGNAL
            "healthcheck": {
                "test": ["CMD", "pg_isready", "-h", "127.0.0.1", "-p", "5432", "-U", "nextcloud", "-d", "nextcloud"],
                "interval": "1s",
                "timeout": "5s",
                "retries": 5,
                "start_period": "120s",
            },
        }
        secret = self.out / STACK / "db_password"
        secret.write_text("test\n", encoding="utf-8")
        secret.chmod(0o600)
        document["secrets"] = {"db_password": {"file": str(secret)}}
        return document

    def sql(self, *args: str, database: str = "nextcloud") -> str:
        """psql in the db container, as root (the dump file is root's, 0600)."""
        proc = self.docker.compose(
            f"homelab-{STACK}", self.out / STACK, "exec", "-T", "-u", "0", "db",
            "psql", "-v", "ON_ERROR_STOP=1", "-U", "nextcloud", "-d", database, "-At", *args,
        )  # fmt: skip
        return proc.stdout.strip()


@pytest.fixture
def pgbox(engine, versions, postgres, make_pool, tmp_path, monkeypatch) -> Iterator[PgBox]:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("HOMELAB_COMPOSE", engine["HOMELAB_COMPOSE"])
    monkeypatch.setenv("HOMELAB_BACKUP_STATE", str(tmp_path / "backup-state"))
    pool = make_pool("384M")
    folders = []
    for name in ("app", "pg"):
        subprocess.run(["zfs", "create", f"{pool}/{name}"], check=True, capture_output=True)
        folders.append(
            Path(
                subprocess.run(
                    ["zfs", "get", "-H", "-o", "value", "mountpoint", f"{pool}/{name}"],
                    capture_output=True, text=True, check=True,
                ).stdout.strip()
            )
        )  # fmt: skip
    os.chown(folders[1], 70, 70)  # the db's uid:gid, as `storage apply` leaves a mountpoint (up refuses another)
    yield PgBox(
        tmp_path / "stacks",
        f"{pool}/app",
        folders[0],
        versions,
        pg_dataset=f"{pool}/pg",
        pg_data=folders[1],
        image=postgres,
    )
    from dockerlab import remove_homelab_resources

    remove_homelab_resources()


def test_postgres_is_dumped_into_its_dataset_and_the_snapshot_holds_the_dump(pgbox: PgBox) -> None:
    pgbox.up("v1")
    pgbox.sql(
        "-c", "CREATE TABLE notes (id int PRIMARY KEY, body text); INSERT INTO notes VALUES (1, 'before the upgrade')"
    )
    pgbox.up("v2-good")
    assert pgbox.running() == (pgbox.versions["v2-good"], "healthy")
    (record,) = upgrade_journal.list_records(pgbox.out)
    dump = pgbox.pg_data / upgrade.DUMP_FILE
    assert record.state == "upgraded" and record.dumps == [str(dump)]
    assert dump.stat().st_mode & 0o777 == 0o600
    text = dump.read_text()
    assert "CREATE TABLE public.notes" in text and "1\tbefore the upgrade" in text
    assert any("dumped db's database nextcloud" in line for line in pgbox.said), pgbox.said
    assert record.snapshot in pgbox.zfs.snapshots(pgbox.pg_dataset)

    # the dump restores into an empty database: complete and consistent
    pgbox.sql("-c", "CREATE DATABASE restored")
    pgbox.sql("-f", f"{upgrade_journal.PGDATA}/{upgrade.DUMP_FILE}", database="restored")
    assert pgbox.sql("-c", "SELECT body FROM notes", database="restored") == "before the upgrade"

    # the snapshot holds the dump: written after the upgrade, gone from the live dataset, back on rollback
    pgbox.sql("-c", "INSERT INTO notes VALUES (2, 'after the upgrade')")
    saved = dump.read_bytes()
    dump.unlink()
    upgrade_undo.rollback(
        pgbox.out, pgbox.docker, pgbox.zfs, STACK, timeout=120, progress=pgbox.said.append, decide=lambda _l: True
    )
    assert dump.read_bytes() == saved
    assert pgbox.running("db")[1] == "healthy"
    assert pgbox.sql("-c", "SELECT count(*) FROM notes") == "1"
