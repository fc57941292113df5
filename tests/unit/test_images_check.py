"""homelab images check, with a fake engine: what is probed, how findings and pull failures read.
(The real engine runs it against the stand-ins in tests/docker/test_images.py.)"""

from __future__ import annotations

import subprocess
from pathlib import Path

from homelab.config.loader import load
from homelab.errors import CommandFailed
from homelab.images.check import check_images, images_in_use, probe_script, read_probe
from homelab.images.facts import all_facts
from homelab.plan import build_plan

RSTUDIO = all_facts()["rocker/rstudio:4.4.2"]


class FakeDocker:
    def __init__(self, local: set[str], outputs: dict[str, str], pull_error: str = "") -> None:
        self.local, self.outputs, self.pull_error = local, outputs, pull_error
        self.pulled: list[str] = []
        self.scripts: dict[str, str] = {}

    def image_ids(self, refs):  # type: ignore[no-untyped-def]
        return {r: "sha256:x" for r in refs if r in self.local}

    def pull(self, ref: str) -> None:
        self.pulled.append(ref)
        if self.pull_error:
            raise CommandFailed(["docker", "pull", ref], 1, "", f"Error response from daemon: {self.pull_error}")

    def run_script(self, image: str, script: str) -> subprocess.CompletedProcess[str]:
        self.scripts[image] = script
        return subprocess.CompletedProcess([], 0, self.outputs.get(image, ""), "")


def test_probe_asks_for_user_programs_absent_programs_and_files() -> None:
    script = probe_script(RSTUDIO)
    assert 'echo "user $(id -u):$(id -g)"' in script
    for name in ("wget", "cat", "sh", "curl"):
        assert f'echo "program {name} $(on_path {name})"' in script
    assert "[ -e /init ]" in script
    # the named user the facts rely on (rocker's rstudio: sessions run as it when USERID is 1000)
    named = 'echo "named rstudio $(id -u rstudio 2>/dev/null || echo -):$(id -g rstudio 2>/dev/null || echo -)"'
    assert named in script


def test_read_probe_good_and_wrong() -> None:
    good = (
        "user 0:0\nnamed rstudio 1000:1000\nprogram cat /usr/bin/cat\nprogram curl -\nprogram sh /bin/sh\n"
        "program wget /usr/bin/wget\nfile /init yes\n"
    )
    assert all(f.ok for f in read_probe(RSTUDIO, good))
    wrong = (
        "user 1000:1000\nnamed rstudio -:-\nprogram cat /usr/bin/cat\nprogram curl /usr/bin/curl\nprogram sh /bin/sh\n"
        "program wget -\nfile /init no\n"
    )
    failed = {f.what: f.found for f in read_probe(RSTUDIO, wrong) if not f.ok}
    assert failed == {
        "user": "1000:1000",
        "user rstudio": "missing",
        "program wget": "missing",
        "absent curl": "present (/usr/bin/curl)",
        "file /init": "no",
    }
    # nothing printed at all (a probe that died early): every fact unknown, none passes
    assert not any(f.ok for f in read_probe(RSTUDIO, ""))


def test_images_in_use_follow_overrides_and_skip_built(example_config: Path) -> None:
    text = example_config.read_text().replace("version: 1\n", "version: 1\nimages: {rstudio: local/rstudio:test}\n", 1)
    example_config.write_text(text)
    reports = {(r.ref, r.facts.name): r.services for r in images_in_use(build_plan(load(example_config)))}
    assert reports[("local/rstudio:test", "rstudio")] == ["rstudio"]
    assert reports[("nextcloud:30.0.4-apache", "nextcloud")] == ["nextcloud", "cron"]
    assert not any(name == "collectd" for _, name in reports)


def test_pull_failure_names_the_image_and_the_registry_error(example_config: Path) -> None:
    plan = build_plan(load(example_config))
    docker = FakeDocker(set(), {}, pull_error="pull access denied for plexinc/pms-docker, repository does not exist")
    reports = check_images(plan, docker)  # type: ignore[arg-type]
    plex = next(r for r in reports if r.facts.name == "plex")
    assert plex.error == (
        "pull plexinc/pms-docker:1.41.3.9314-a0bfb8370 failed: Error response from daemon: "
        "pull access denied for plexinc/pms-docker, repository does not exist"
    )
    assert not plex.ok and docker.scripts == {}


def test_local_images_are_not_pulled(example_config: Path) -> None:
    plan = build_plan(load(example_config))
    refs = {r.ref for r in images_in_use(plan)}
    docker = FakeDocker(refs, {})
    check_images(plan, docker)  # type: ignore[arg-type]
    assert docker.pulled == [] and set(docker.scripts) == refs


# what the probe prints in rocker/rstudio:4.4.2 as pulled before 2024-11-14 (built before rocker-versioned2
# 99aa645): ubuntu:noble's own `ubuntu` holds 1000:1000, so default_user.sh's `useradd rstudio` got 1001:1001
OLD_RSTUDIO = (
    "user 0:0\nnamed rstudio 1001:1001\nprogram cat /usr/bin/cat\nprogram curl -\nprogram sh /bin/sh\n"
    "program wget /usr/bin/wget\nfile /init yes\n"
)


def test_an_rstudio_pulled_before_the_uid_fix_fails_naming_the_user(example_config: Path) -> None:
    plan = build_plan(load(example_config))
    refs = {r.ref for r in images_in_use(plan)}
    docker = FakeDocker(refs, {"rocker/rstudio:4.4.2": OLD_RSTUDIO})
    reports = {r.facts.name: r for r in check_images(plan, docker)}  # type: ignore[arg-type]
    assert "id -u rstudio" in docker.scripts["rocker/rstudio:4.4.2"]
    rstudio = reports["rstudio"]
    assert not rstudio.ok and rstudio.error is None
    assert [(f.what, f.expected, f.found) for f in rstudio.findings if not f.ok] == [
        ("user rstudio", "1000:1000", "1001:1001")
    ]
    # the same image with rstudio at 1000:1000 (built at or after 99aa645) passes
    docker = FakeDocker(refs, {"rocker/rstudio:4.4.2": OLD_RSTUDIO.replace("1001:1001", "1000:1000")})
    assert next(r for r in check_images(plan, docker) if r.facts.name == "rstudio").ok  # type: ignore[arg-type]


def test_the_probe_stats_the_folders_the_start_up_works_in() -> None:
    """The start-up facts checkable without running the app: the owner of each folder the image ships for it
    (Postgres's PGDATA and socket folder, which its entrypoint walks)."""
    postgres = all_facts()["postgres:16.6-alpine"]
    script = probe_script(postgres)
    assert 'echo "owner /var/lib/postgresql/data $(stat -c %u:%g /var/lib/postgresql/data' in script
    base = "user 0:0\nprogram pg_isready /usr/local/bin/pg_isready\nprogram sh /bin/sh\n"
    base += "file /usr/local/bin/docker-entrypoint.sh yes\n"
    good = base + "owner /var/lib/postgresql/data 70:70\nowner /var/run/postgresql 70:70\n"
    assert all(f.ok for f in read_probe(postgres, good))
    wrong = base + "owner /var/lib/postgresql/data 999:999\nowner /var/run/postgresql missing\n"
    failed = {f.what: f.found for f in read_probe(postgres, wrong) if not f.ok}
    assert failed == {"owner /var/lib/postgresql/data": "999:999", "owner /var/run/postgresql": "missing"}
