"""`sso:` in homelab.yaml and `homelab sso passwd`: refusals name file, line and key; the hash the command
writes is checked by the C library's crypt() (through perl, as the portal checks it), not by our code."""

from __future__ import annotations

import stat
import subprocess
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from homelab.cli import app
from homelab.config.loader import load
from homelab.errors import ConfigError
from tests.conftest import write_secret

runner = CliRunner()
PASSWORD = "correct horse battery"


def _config(folder: Path, sso: dict[str, object]) -> Path:
    data = yaml.safe_load((folder / "homelab.yaml").read_text())
    data["sso"] = sso
    path = folder / "homelab.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _sso(**apps: str) -> dict[str, object]:
    return {
        "enabled": True,
        "groups": ["family", "admins"],
        "users": {"alice": {"password_file": "secrets/sso-alice", "groups": ["admins"], "totp": True}},
        "apps": {app: {"access": access} for app, access in apps.items()},
    }


def _problems(path: Path) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load(path)
    return caught.value.problems


def _line(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def test_plex_refused_behind_forward_auth_and_oidc(example_dir: Path) -> None:
    for access in ("forward-auth", "oidc"):
        path = _config(example_dir, _sso(plex=access))
        (example_dir / "secrets" / "sso-alice").unlink(missing_ok=True)
        runner.invoke(app, ["sso", "passwd", "alice", "--stdin", "-c", str(path)], input=PASSWORD + "\n")
        message = "\n".join(_problems(path))
        assert f"homelab.yaml:{_line(path, 'access: ' + access)}: sso.apps.plex.access: plex cannot use" in message
        assert "Plex's apps (TVs, phones, plex.tv) cannot pass a login portal" in message


def test_unknown_group_and_oidc_on_an_app_without_it(example_dir: Path) -> None:
    sso = _sso(rstudio="oidc")
    sso["users"]["bob"] = {"password_file": "secrets/sso-alice", "groups": ["famliy"]}  # type: ignore[index]
    sso["apps"]["gitea"] = {"access": "oidc", "groups": ["staff"]}  # type: ignore[index]
    path = _config(example_dir, sso)
    message = "\n".join(_problems(path))
    assert f":{_line(path, '- famliy')}: sso.users.bob.groups.0: group 'famliy' is not listed in sso.groups" in message
    assert "sso.apps.rstudio.access: rstudio has no OpenID Connect login: use 'forward-auth'" in message
    assert "sso.apps.gitea.groups.0: group 'staff' is not listed in sso.groups" in message


def test_unknown_key_is_named(example_dir: Path) -> None:
    sso = _sso(gitea="oidc")
    sso["users"]["alice"]["totp_secret"] = "x"  # type: ignore[index]
    path = _config(example_dir, sso)
    message = "\n".join(_problems(path))
    assert "sso.users.alice.totp_secret:" in message


def test_portal_subdomain_taken_by_an_app(example_dir: Path) -> None:
    sso = _sso(gitea="oidc")
    sso["subdomain"] = "git"
    path = _config(example_dir, sso)
    write_secret(example_dir / "secrets" / "sso-alice", "x")
    message = "\n".join(_problems(path))
    assert "sso.subdomain: subdomain 'git' is already used by gitea" in message


def test_a_plain_password_in_the_password_file_is_refused_unechoed(example_dir: Path) -> None:
    path = _config(example_dir, _sso(gitea="oidc"))
    write_secret(example_dir / "secrets" / "sso-alice", PASSWORD)
    message = "\n".join(_problems(path))
    assert "sso.users.alice.password_file: the secret file holds no bcrypt password hash: write it with " in message
    assert PASSWORD not in message


def test_passwd_writes_a_private_hash_that_crypt_accepts(example_dir: Path, require_program) -> None:
    perl = require_program("perl")
    path = _config(example_dir, _sso(gitea="oidc"))
    result = runner.invoke(app, ["sso", "passwd", "alice", "--stdin", "-c", str(path)], input=PASSWORD + "\n")
    assert result.exit_code == 0, result.output
    secret = example_dir / "secrets" / "sso-alice"
    stored = secret.read_text().strip()
    assert PASSWORD not in result.output and stored not in result.output
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    check = "print crypt($ARGV[0], $ARGV[1]) eq $ARGV[1] ? 'yes' : 'no'"
    for given, verdict in ((PASSWORD, "yes"), (PASSWORD + "!", "no"), ("", "no")):
        out = subprocess.run([perl, "-e", check, given, stored], capture_output=True, text=True, check=True).stdout
        assert out == verdict, given
    load(path)  # the hash passes the load-time check


def test_passwd_refuses_unknown_user_and_short_password_and_writes_nothing(example_dir: Path) -> None:
    path = _config(example_dir, _sso(gitea="oidc"))
    result = runner.invoke(app, ["sso", "passwd", "mallory", "--stdin", "-c", str(path)], input=PASSWORD + "\n")
    assert result.exit_code == 2
    assert "sso.users: no user 'mallory' (users: alice)" in result.output
    result = runner.invoke(app, ["sso", "passwd", "alice", "--stdin", "-c", str(path)], input="short\n")
    assert result.exit_code == 2
    assert "the password is shorter than 10 characters; nothing was written" in result.output
    assert "short" not in result.output.replace("shorter", "")
    assert not (example_dir / "secrets" / "sso-alice").exists()
