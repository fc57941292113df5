"""The recovery bundle written last by every successful run (fakes: rclone a folder, Docker recorded)."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import bcrypt
import pytest

from homelab.backup import bundle, run_backup
from homelab.backup.context import BackupError
from homelab.layout import project_name
from homelab.plan import build_plan
from homelab.project import render_project
from homelab.runtime.rclone_log import Result
from tests.backup.conftest import fill
from tests.backup.fast import FastLab, make_fast_lab
from tests.fakes.docker import FakeDocker, container
from tests.storage.zfs import write_secret


@pytest.fixture
def lab(tmp_path: Path) -> FastLab:
    lab = make_fast_lab(tmp_path)
    base = lab.config.parent
    stacks = base / "stacks"
    write_secret(stacks / "secrets" / "rstudio_password", "generated-rstudio-value")
    (stacks / "rstudio").mkdir(parents=True)
    (stacks / "rstudio" / "compose.override.yaml").write_text("services: {}\n")
    return lab


def members(lab: FastLab, run_id: str) -> dict[str, bytes]:
    data = (lab.rclone.root / "offsite" / "bundles" / f"{run_id}.tar").read_bytes()
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return {i.name: tar.extractfile(i).read() for i in tar if i.isfile()}  # type: ignore[union-attr]


def test_a_run_writes_the_bundle_last_with_config_secrets_and_a_checked_manifest(lab: FastLab) -> None:
    fill(lab.data, small=3, large=0, sparse=1 << 12)
    record = run_backup(lab.ctx()).record
    assert record.bundle == f"bundles/{record.id}.tar"
    copies = [c[2] for c in lab.rclone.calls if c[0] in ("copyto", "sync")]
    assert str(copies[-1]).endswith(f"bundles/{record.id}.tar")  # after every dataset's sync and listing
    found = members(lab, record.id)
    assert list(found)[-1] == bundle.MANIFEST  # last: a bundle cut short has none
    assert found["config/homelab.yaml"] == lab.config.read_bytes()
    assert found["config/stacks/secrets/rstudio_password"] == b"generated-rstudio-value\n"
    assert "config/stacks/rstudio/compose.override.yaml" in found
    password = (lab.config.parent / "secrets" / "backup-crypt-password").read_bytes().strip()
    salt = (lab.config.parent / "secrets" / "backup-crypt-salt").read_bytes().strip()
    assert not any(password in data or salt in data for data in found.values())
    checked = bundle.read(b"".join(_tar(found)), "x")
    assert checked.manifest.run == record.id
    assert [d.key for d in checked.manifest.datasets if d.backed_up] == ["rstudio/home"]
    assert checked.manifest.images["dev/rstudio"].startswith("rocker/")


def _tar(found: dict[str, bytes]) -> list[bytes]:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in found.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return [buffer.getvalue()]


def test_a_file_holding_the_crypt_password_is_left_out(lab: FastLab) -> None:
    fill(lab.data, small=3, large=0, sparse=1 << 12)
    ctx = lab.ctx()
    write_secret(lab.config.parent / "stacks" / "secrets" / "copied", ctx.crypt_secrets[0])
    record = run_backup(ctx).record
    found = members(lab, record.id)
    assert "config/stacks/secrets/copied" not in found
    assert "left out, it holds the crypt password or salt" in found[bundle.MANIFEST].decode()


def test_no_bundle_after_a_failed_dataset(lab: FastLab) -> None:
    fill(lab.data, small=3, large=0, sparse=1 << 12)
    lab.rclone.fail["sync"] = Result(False, 1, errors=["denied"])
    with pytest.raises(BackupError):
        run_backup(lab.ctx())
    assert not (lab.rclone.root / "offsite" / "bundles").exists()


def test_a_running_postgres_is_dumped_into_the_bundle(tmp_path: Path) -> None:
    lab = make_fast_lab(tmp_path, apps=frozenset({"rstudio", "nextcloud"}))
    docker = FakeDocker(container(project_name("cloud"), "db"))
    docker.exec_output["db"] = b"-- PostgreSQL database dump\nCREATE TABLE sentinel ();\n"
    ctx = lab.ctx(engine=docker)
    data = bundle.build(ctx, "r1", docker, ctx.crypt_secrets)
    read = bundle.read(data, "r1")
    (dump,) = read.manifest.dumps
    assert (dump.stack, dump.service, dump.dataset) == ("cloud", "db", "nextcloud/db")
    assert read.member(dump.member).startswith(b"-- PostgreSQL database dump")
    assert ("exec", project_name("cloud"), "db", "pg_dump", "--username", "nextcloud") == docker.calls[-1][:6]


def test_a_bundle_cut_short_or_altered_is_refused(lab: FastLab) -> None:
    fill(lab.data, small=3, large=0, sparse=1 << 12)
    ctx = lab.ctx()
    data = bundle.build(ctx, "r1", None, ctx.crypt_secrets)
    with pytest.raises(BackupError, match=r"bundle r1 is truncated"):
        bundle.read(data[: len(data) // 2], "r1")
    assert bundle.read(data, "r1").manifest.run == "r1"
    altered = data.replace(b"generated-rstudio-value", b"generated-rstudio-VALUE")
    with pytest.raises(BackupError, match=r"bundle r1 is damaged: config/stacks/secrets/rstudio_password"):
        bundle.read(altered, "r1")


def test_the_sso_portal_is_backed_up_with_its_generated_oidc_secrets_in_the_bundle(tmp_path: Path) -> None:
    """The portal's sessions and TOTP enrolments (sso/data, a backup role by default) and what a recovery needs
    to bring the same provider back: the OIDC signing key and client secrets (the apps hold the secrets, and
    ID tokens are checked against the key), the users' hash files."""
    sso = {
        "enabled": True,
        "groups": ["admins"],
        "users": {"alice": {"password_file": "secrets/sso-alice", "groups": ["admins"], "totp": True}},
        "apps": {"grafana": {"access": "oidc", "groups": ["admins"]}},
    }
    alice = bcrypt.hashpw(b"alice-password", bcrypt.gensalt(rounds=4)).decode()
    lab = make_fast_lab(
        tmp_path,
        apps=frozenset({"monitoring"}),
        key="sso/data",
        extra={"sso": sso},
        secrets={"secrets/sso-alice": alice},
    )
    assert "sso/data" in {d.key for d in build_plan(lab.loaded).datasets if d.backup}  # without backup.datasets too
    rendered = render_project(lab.loaded)
    generated = rendered.out / "secrets"
    fill(lab.data, small=3, large=0, sparse=1 << 12)
    record = run_backup(lab.ctx()).record
    found = members(lab, record.id)
    for name in ("sso_oidc_key", "sso_oidc_grafana", "sso_lmconf", "sso_users"):
        assert found[f"config/stacks/secrets/{name}"] == (generated / name).read_bytes(), name
    assert b"PRIVATE KEY" in found["config/stacks/secrets/sso_oidc_key"]
    assert found["config/secrets/sso-alice"].decode().strip() == alice
    checked = bundle.read(b"".join(_tar(found)), "x")
    assert [d.key for d in checked.manifest.datasets if d.backed_up] == ["sso/data"]
    assert checked.manifest.images["sso/sso"].startswith("lemonldapng/lemonldap-ng:")
