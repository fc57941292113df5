"""Values a careless operator writes that used to render a broken stack (issue 32). The single-file cases
are in the bad-config corpus (tests/fixtures/bad: port-true, port-quoted-string, port-leading-zero,
cidr-zone-id, domain-ip-literal, domain-label-too-long, domain-app-names-too-long, mountpoint-under-proc,
mountpoint-under-run, smtp-host-free-text, ddns-hostname-ip); here the ones that depend on where the config
lives (a resources refusal found while planning names file:line: tests/unit/test_resources.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from homelab.config.loader import load
from homelab.errors import ConfigError

BASE = "version: 1\nserver:\n  hostname: nas\ndomain:\n  name: example.com\n  acme:\n    email: a@example.com\n"


def _problems(path: Path, extra: str) -> list[str]:
    path.write_text(BASE + extra)
    with pytest.raises(ConfigError) as caught:
        load(path)
    return caught.value.problems


@pytest.mark.parametrize("inside", ["stacks", "stacks/data", "local", "local/data"])
def test_a_mountpoint_inside_an_output_folder_is_refused(tmp_path: Path, inside: str) -> None:
    folder = tmp_path / inside
    assert _problems(tmp_path / "homelab.yaml", f"storage:\n  mountpoint: {folder}\n") == [
        f"{tmp_path / 'homelab.yaml'}:9: storage.mountpoint: {str(folder)!r} is inside "
        f"{tmp_path / inside.split('/')[0]}, a folder homelab writes its output to"
    ]


def test_a_backup_state_dir_under_run_is_refused(tmp_path: Path) -> None:
    problems = _problems(
        tmp_path / "homelab.yaml",
        "backup:\n  remotes:\n    usb: {type: local, path: /mnt/usb}\n  state_dir: /run/homelab\n",
    )
    assert problems == [
        f"{tmp_path / 'homelab.yaml'}:11: backup.state_dir: '/run/homelab' is under /run, a kernel or run-time "
        "file system; use a folder on disk"
    ]


@pytest.mark.parametrize("folder", ["/tank/homelab", "/srv/stacks", "/mnt/run/x", "/data/proc"])
def test_ordinary_data_folders_pass(tmp_path: Path, folder: str) -> None:
    (tmp_path / "homelab.yaml").write_text(BASE + f"storage:\n  mountpoint: {folder}\n")
    assert load(tmp_path / "homelab.yaml").config.storage.mountpoint == folder


@pytest.mark.parametrize(
    ("extra", "value"),
    [
        ("edge:\n  http_port: 8080\n", 8080),
        ("edge:\n  http_port: 0\n", None),  # refused by the range, with its line
        ("monitoring:\n  smtp:\n    host: 192.0.2.25\n    from_address: a@example.com\n", "192.0.2.25"),
        ("monitoring:\n  smtp:\n    host: smtp.example.com\n    from_address: a@example.com\n", "smtp.example.com"),
    ],
)
def test_well_formed_ports_and_smtp_hosts_pass(tmp_path: Path, extra: str, value: object) -> None:
    path = tmp_path / "homelab.yaml"
    path.write_text(BASE + extra)
    if value is None:
        with pytest.raises(ConfigError, match=r"homelab.yaml:9: edge.http_port: Input should be greater"):
            load(path)
        return
    config = load(path).config
    assert value in (config.edge.http_port, config.monitoring.smtp and config.monitoring.smtp.host)


def test_a_backup_dataset_of_a_disabled_app_names_file_and_line(tmp_path: Path) -> None:
    from homelab.backup.context import context

    path = tmp_path / "homelab.yaml"
    path.write_text(
        BASE + "apps:\n  plex:\n    enabled: false\n"
        "backup:\n  remotes:\n    usb: {type: local, path: /mnt/usb}\n  datasets: [gitea/data, plex/config]\n"
    )
    with pytest.raises(ConfigError) as caught:
        context(load(path), read_only=True)
    assert caught.value.problems == [
        f"{path}:14: backup.datasets: not a dataset of an enabled app: plex/config"  # the inline list's line
    ]
