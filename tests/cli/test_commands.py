"""CLI in-process: exact messages and exit codes for the happy paths."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from homelab.cli import app
from homelab.cli import commands as _commands  # noqa: F401 - registers the commands
from homelab.config.loader import load
from homelab.project import render_project
from tests.conftest import EXAMPLE, write_secret

runner = CliRunner()

COMMANDS = ["init", "validate", "render", "plan", "doctor"]


def _tree(root: Path) -> dict[str, tuple[bytes, float]]:
    return {str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file()}


def test_help_lists_every_command() -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for command in COMMANDS:
        assert command in result.stdout


def _all_command_paths() -> list[list[str]]:
    from typer.main import get_command

    paths: list[list[str]] = []

    def walk(command, prefix: list[str]) -> None:
        for name, sub in getattr(command, "commands", {}).items():
            paths.append([*prefix, name])
            walk(sub, [*prefix, name])

    walk(get_command(app), [])
    return paths


def test_every_command_has_help() -> None:
    paths = _all_command_paths()
    assert {p[0] for p in paths} >= set(COMMANDS)
    for path in paths:
        result = runner.invoke(app, [*path, "--help"])
        assert result.exit_code == 0, (path, result.output)
        assert result.stdout.startswith(f"Usage: homelab {' '.join(path)} ") or result.stdout.startswith(
            f"Usage: root {' '.join(path)} "
        ), (path, result.stdout)
        summary = [line for line in result.stdout.splitlines()[1:] if line.strip()]
        assert summary and not summary[0].strip().startswith("Options"), (path, "command has no help text")


def test_version() -> None:
    result = runner.invoke(app, ["--version"])
    assert result.stdout == "homelab 0.1.0\n"


def test_init_writes_the_example_and_never_overwrites(tmp_path: Path) -> None:
    result = runner.invoke(app, ["init"])
    assert result.exit_code == 0, result.output
    assert result.stdout == (
        "wrote homelab.yaml; edit it, create the secret files it names (chmod 600), then: homelab validate\n"
    )
    assert (tmp_path / "homelab.yaml").read_text() == EXAMPLE.read_text()
    (tmp_path / "homelab.yaml").write_text("mine\n")
    again = runner.invoke(app, ["init"])
    assert again.exit_code == 5  # refused to overwrite
    assert again.stderr == "error: homelab.yaml already exists; not overwriting it\n"
    assert (tmp_path / "homelab.yaml").read_text() == "mine\n"


MISSING = "the secret file does not exist (the path is relative to homelab.yaml's folder)"


def test_init_then_validate_names_the_missing_secrets(tmp_path: Path) -> None:
    runner.invoke(app, ["init"])
    result = runner.invoke(app, ["validate"])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        f"homelab.yaml:32: ddns.password_file: {MISSING}",
        f"homelab.yaml:71: backup.remotes.offsite.secret_options.account: {MISSING}",
        f"homelab.yaml:72: backup.remotes.offsite.secret_options.key: {MISSING}",
    ]


def test_validate_ok(example_config: Path) -> None:
    result = runner.invoke(app, ["validate", "-c", str(example_config)])
    assert result.exit_code == 0, result.output
    assert result.stdout == f"{example_config}: ok\n"


def test_render_then_rerender_writes_nothing(example_config: Path) -> None:
    first = runner.invoke(app, ["render", "-c", str(example_config)])
    assert first.exit_code == 0, first.output
    out = example_config.parent / "stacks"
    assert "stacks affected: edge, media, cloud, dev, monitoring" in first.stdout
    before = _tree(out)
    second = runner.invoke(app, ["render", "-c", str(example_config)])
    assert second.exit_code == 0
    assert second.stdout == f"no changes: {len(before) - 2} files identical in {out}\n"
    assert _tree(out) == before


def test_plan_shows_changes_and_writes_nothing(example_config: Path) -> None:
    runner.invoke(app, ["render", "-c", str(example_config)])
    text = example_config.read_text().replace("upload_limit: 16G", "upload_limit: 32G")
    example_config.write_text(text)
    out = example_config.parent / "stacks"
    before = _tree(out)
    result = runner.invoke(app, ["plan", "-c", str(example_config)])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[-2:] == [
        f"1 changed, {len(before) - 3} identical in {out}",
        "stacks affected: cloud",
    ]
    assert "  changed  cloud/compose.yaml" in result.stdout
    assert _tree(out) == before


def test_secrets_are_0600_in_a_0700_dir_reused_and_never_printed(example_config: Path) -> None:
    write_secret(example_config.parent / "secrets" / "ddns-password", "CANARY-ddns-0123")
    result = runner.invoke(app, ["-vv", "render", "-c", str(example_config)])
    assert result.exit_code == 0, result.output
    out = example_config.parent / "stacks"
    secrets_dir = out / "secrets"
    assert stat.S_IMODE(secrets_dir.stat().st_mode) == 0o700
    generated = {p.name: p.read_bytes() for p in secrets_dir.iterdir()}
    for path in secrets_dir.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert len(generated["nextcloud_db_password"].strip()) >= 43
    assert b"CANARY-ddns-0123" in generated["edge_ddclient_conf"]
    for path in out.rglob("*"):
        if path.is_file() and "secrets" not in path.parts:
            assert b"CANARY-ddns-0123" not in path.read_bytes(), path
            for value in generated.values():
                assert value.strip() not in path.read_bytes(), path
    assert "CANARY-ddns-0123" not in result.output
    # a second render reuses every generated secret
    runner.invoke(app, ["render", "-c", str(example_config)])
    assert {p.name: p.read_bytes() for p in secrets_dir.iterdir()} == generated


def test_loosened_secret_mode_is_restored(example_config: Path) -> None:
    runner.invoke(app, ["render", "-c", str(example_config)])
    secret = example_config.parent / "stacks" / "secrets" / "nextcloud_db_password"
    secret.chmod(0o644)
    runner.invoke(app, ["render", "-c", str(example_config)])
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600


def test_hand_edited_file_is_not_overwritten_without_force(example_config: Path) -> None:
    runner.invoke(app, ["render", "-c", str(example_config)])
    edited = example_config.parent / "stacks" / "cloud" / "compose.yaml"
    edited.write_text(edited.read_text() + "# my tweak\n")
    example_config.write_text(example_config.read_text().replace("upload_limit: 16G", "upload_limit: 32G"))
    result = runner.invoke(app, ["render", "-c", str(example_config)])
    assert result.exit_code == 5  # refused to overwrite
    assert result.stderr == (
        "error: not overwriting files homelab did not write or that were edited by hand:\n"
        f"  {edited}\n"
        "edit homelab.yaml instead, or pass --force to replace them\n"
    )
    assert edited.read_text().endswith("# my tweak\n")
    forced = runner.invoke(app, ["render", "--force", "-c", str(example_config)])
    assert forced.exit_code == 0
    assert "# my tweak" not in edited.read_text()


def test_disabling_an_app_removes_its_unedited_files(example_config: Path) -> None:
    runner.invoke(app, ["render", "-c", str(example_config)])
    text = example_config.read_text().replace("  plex:\n", "  plex:\n    enabled: false\n")
    example_config.write_text(text)
    result = runner.invoke(app, ["render", "-c", str(example_config)])
    assert result.exit_code == 0, result.output
    assert "  removed  media/compose.yaml" in result.stdout
    assert not (example_config.parent / "stacks" / "media" / "compose.yaml").exists()


def test_out_option(example_config: Path, tmp_path: Path) -> None:
    result = runner.invoke(app, ["render", "-c", str(example_config), "--out", str(tmp_path / "elsewhere")])
    assert result.exit_code == 0
    assert (tmp_path / "elsewhere" / "edge" / "compose.yaml").is_file()


def test_env_var_selects_config(example_config: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOMELAB_CONFIG", str(example_config))
    result = runner.invoke(app, ["validate"])
    assert result.exit_code == 0, result.output


def test_secret_owner_is_the_reader(example_config: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("chown needs root")
    result = render_project(load(example_config))
    secret = result.out / "secrets" / "monitoring_grafana_admin_password"
    assert secret.stat().st_uid == 472
