"""`homelab recover` brings the whole server back on the engine (issue 30's proof, with the stacks).

A server of every app (the stand-ins of standins.py; Nextcloud's database REAL PostgreSQL, the image of
test_upgrade_dump) on a zfs-fuse pool is brought up, backed up with `homelab backup run` to an `rclone serve
sftp` remote (its sentinels written, Postgres dumped into the bundle, Nextcloud's database dataset left out of
the backup), and taken down: the box is gone. `homelab recover` onto a fresh pool of another name and
mountpoint, into a fresh config folder, then brings every stack up healthy through the health gate, loads the
dump into the database that started empty, and reads every sentinel back - the row through the recovered
Postgres. The restored datasets equal the source's folders byte for byte (but acme.json, which Traefik
rewrites as it starts: its certificates are there; the byte-exact proof against the snapshot of every
dataset, acme.json included, is test_recover_real's).
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
import standins
import yaml
from dockerlab import HOMELAB, free_port, make_deployment, remove_homelab_resources
from test_upgrade_dump import postgres_image

from homelab.backup.sentinel import PLEX_PREFERENCES
from homelab.config.loader import load
from homelab.images.facts import all_facts
from homelab.plan import build_plan
from tests.backup.conftest import tree
from tests.backup.test_recover_real import _remote_spec
from tests.backup.test_served_remotes import _remote, _serve
from tests.conftest import write_secret
from tests.storage.zfs import make_pool, zfs_daemon  # noqa: F401 - fixtures

pytestmark = [pytest.mark.docker, pytest.mark.real, pytest.mark.timeout(600)]

APPS = {
    "plex": {"transcode_device": None},
    "nextcloud": {"subdomain": "cloud"},
    "gitea": {"subdomain": "git"},
    "jenkins": {"subdomain": "ci"},
    "rstudio": {},
}
BACKED_UP = ["edge/acme", "plex/config", "nextcloud/html", "nextcloud/data", "gitea/data", "gitea/config"]
BACKED_UP += ["jenkins/home", "rstudio/home"]  # not nextcloud/db: the recovery starts it from its dump


def rewritten_at_start(config: Path) -> dict[str, set[str]]:
    """Per dataset, the files its services' start-ups write on every start (the image facts' `write`
    operations without `unless`, under the service's mount of the dataset), so a recovered dataset that has
    started differs there; plus the cron stand-in's environment dump (tests/docker/images/faithful/standin)."""
    facts = all_facts()
    pinned = config.with_name("homelab-pinned.yaml")  # the catalog's images (the facts' keys), not the stand-ins
    data = yaml.safe_load(config.read_text())
    data.pop("images", None)
    pinned.write_text(yaml.safe_dump(data, sort_keys=False))
    plan = build_plan(load(pinned))
    out: dict[str, set[str]] = {d.key: set() for d in plan.datasets}
    by_path = {d.path: d.key for d in plan.datasets}
    for stack in plan.stacks.values():
        for service in stack.services.values():
            image = facts.get(service.image)
            ops = [op for op in image.startup if op.do == "write" and not op.unless] if image else []
            for mount in (m for m in service.mounts if m.source in by_path):
                target = mount.target.rstrip("/") + "/"
                out[by_path[mount.source]] |= {op.path.removeprefix(target) for op in ops if op.path.startswith(target)}
    out["nextcloud/html"].add("standin-cron-env")
    return out


def test_recover_brings_every_stack_up_and_every_sentinel_back(world, make_pool, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "pg-image").mkdir()
    postgres = postgres_image(tmp_path / "pg-image")
    with _serve("sftp", tmp_path / "server") as server:
        lab = make_deployment(
            tmp_path / "lab",
            world,
            {**APPS, "gitea": {**APPS["gitea"], "ssh_port": free_port()}},
            extra_images={"db": postgres},
        )
        pool = make_pool("512M")
        write_secret(lab.base / "secrets" / "served-remote-pass", server.password)
        lab.data["storage"] = {"pool": pool, "root": f"{pool}/homelab", "mountpoint": str(tmp_path / "src")}
        lab.data["backup"] = {
            "remotes": {"sftp": _remote(server)},
            "datasets": BACKED_UP,
            "stall_timeout": 30,
            "state_dir": str(tmp_path / "state"),
        }
        lab.write()
        lab.homelab("storage", "apply")
        prefs = tmp_path / "src" / "plex" / "config" / PLEX_PREFERENCES
        prefs.parent.mkdir(parents=True)
        prefs.write_text('<?xml version="1.0" encoding="utf-8"?>\n<Preferences MachineIdentifier="m-1"/>\n')
        try:
            lab.homelab("render")
            lab.write_overrides()
            # real Postgres: initdb takes seconds on a busy box, more than the fast probes' 3 retries
            override = lab.stacks_dir / "cloud" / "compose.override.yaml"
            fast = yaml.safe_load(override.read_text())
            fast["services"]["db"]["healthcheck"]["start_period"] = "120s"
            override.write_text(yaml.safe_dump(fast))
            lab.homelab("up", "--timeout", "180")
            backup = lab.homelab("backup", "run", timeout=300)
            assert "bundle  bundles/" in backup.stdout, backup.stdout
            lab.homelab("down")
            source = {key: tree(tmp_path / "src" / key) for key in BACKED_UP}

            new_pool = make_pool("512M")
            secrets = lab.base / "secrets"
            argv = [HOMELAB, "recover", "--remote", _remote_spec(server), "--config-dir", str(tmp_path / "new")]
            argv += ["--password-file", str(secrets / "backup-crypt-password"), "--salt-file"]
            argv += [str(secrets / "backup-crypt-salt"), "--pool", new_pool, "--mountpoint", str(tmp_path / "dst")]
            argv += ["--stall-timeout", "30"]
            proc = subprocess.run(argv, capture_output=True, text=True, env=lab.env, timeout=480, check=False)
            assert proc.returncode == 0, proc.stdout + proc.stderr
            out = proc.stdout
            for step in ("bundle", "config", "restore rstudio/home", "stacks", "load cloud/db", "sentinels"):
                assert any(line.startswith(step) for line in out.splitlines()), (step, out)
            for sentinel in (
                "jenkins:",
                "rstudio:",
                "nextcloud:",
                "plex:",
                "gitea:",
                "cloud: cloud/db homelab_sentinel",
            ):
                assert any(line.startswith(f"sentinel {sentinel}") for line in out.splitlines()), (sentinel, out)
            assert "RTO" in out and "RPO" in out
            healthy = standins.docker(
                "ps", "--filter", "label=com.docker.compose.project", "--format", "{{.Names}} {{.Status}}"
            ).stdout
            for project in ("homelab-edge", "homelab-media", "homelab-cloud", "homelab-dev"):
                assert project in healthy, healthy
            assert "unhealthy" not in healthy and "starting" not in healthy, healthy
            # Traefik rewrites acme.json once it runs (on both sides): the certificates came back, not its bytes;
            # the files the apps' start-ups write on every start (their image facts) are compared by presence
            for key in (k for k in BACKED_UP if k != "edge/acme"):
                recovered, kept = tree(tmp_path / "dst" / key), source[key]
                rewritten = rewritten_at_start(lab.config)[key]
                assert {p: h for p, h in recovered.items() if p not in rewritten} == {
                    p: h for p, h in kept.items() if p not in rewritten
                }, key
                assert rewritten & set(kept) <= set(recovered), key
            acme_json = tmp_path / "dst" / "edge" / "acme" / "acme.json"
            deadline = time.monotonic() + 15  # Traefik saves it by truncating then writing: read it whole
            while not acme_json.read_text().strip() and time.monotonic() < deadline:
                time.sleep(0.2)
            acme = json.loads(acme_json.read_text())
            assert any(resolver.get("Certificates") for resolver in acme.values()), acme.keys()
        finally:
            remove_homelab_resources()
