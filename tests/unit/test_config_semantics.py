"""What the semantic checks let through, and how they normalise it: the refusals are in the bad-config
corpus (tests/cli/test_bad_configs.py); here the inputs a real server uses must keep working."""

from __future__ import annotations

from pathlib import Path

import pytest

from homelab.config.loader import load
from homelab.config.secretfiles import content_problem
from homelab.errors import ConfigError
from tests.conftest import write_secret

BASE = "version: 1\nserver:\n  hostname: nas\n{server}domain:\n  name: example.com\n  acme:\n    email: a@example.com\n"


def _load(tmp_path: Path, extra: str = "", server: str = ""):  # type: ignore[no-untyped-def]
    path = tmp_path / "homelab.yaml"
    path.write_text(BASE.format(server=server) + extra)
    return load(path).config


@pytest.mark.parametrize("zone", ["UTC", "Europe/Berlin", "America/Argentina/Buenos_Aires", "Etc/GMT+5"])
def test_real_time_zones_pass(tmp_path: Path, zone: str) -> None:
    assert _load(tmp_path, server=f"  timezone: {zone}\n").server.timezone == zone


def test_paths_are_normalised(tmp_path: Path) -> None:
    config = _load(
        tmp_path,
        "storage:\n  mountpoint: /tank//homelab/\n"
        "apps:\n  plex:\n    transcode_device: /dev/dri/renderD128\n    media_paths: {films: /srv/./films/}\n",
    )
    assert config.storage.mountpoint == "/tank/homelab"
    assert config.apps.plex.transcode_device == "/dev/dri/renderD128"
    assert config.apps.plex.media_paths == {"films": "/srv/films"}


def test_networks_written_as_networks_pass(tmp_path: Path) -> None:
    config = _load(tmp_path, "edge:\n  lan_cidrs: [10.0.0.0/8, 192.168.1.0/24, 'fd00::/8', 192.168.1.7/32]\n")
    assert config.edge.lan_cidrs == ["10.0.0.0/8", "192.168.1.0/24", "fd00::/8", "192.168.1.7/32"]


def test_a_single_address_is_a_one_host_network(tmp_path: Path) -> None:
    assert _load(tmp_path, "edge:\n  lan_cidrs: [192.168.1.7]\n").edge.lan_cidrs == ["192.168.1.7/32"]


def test_known_map_keys_pass(tmp_path: Path) -> None:
    write_secret(tmp_path / "secrets" / "k", "key")
    config = _load(
        tmp_path,
        "storage:\n  datasets:\n    plex/media: {properties: {recordsize: 1M, 'com.example:note': x}}\n"
        "images:\n  traefik: traefik:v3.1.0\n  grafana: grafana/grafana:11.0.0\n"
        "backup:\n  remotes:\n    usb: {type: local, path: /mnt/usb}\n  datasets: [nextcloud/data, gitea/data]\n"
        "  schedule: Mon..Fri *-*-* 02:30\n",
    )
    assert config.backup is not None and config.backup.schedule == "Mon..Fri *-*-* 02:30"


@pytest.mark.parametrize(
    ("loc", "content"),
    [
        (("ddns", "password_file"), b'pa"ss word\n'),  # ddclient quotes in '...': a double quote is fine
        (("monitoring", "ipmi", "password_file"), b"it's\r\n"),  # collectd quotes in "...": a single one is
        (("backup", "remotes", "usb", "secret_options", "key"), b"a;b#c'd\n"),  # rclone keeps these (checked)
        (("apps", "plex", "claim_token_file"), "claim-ünïcode".encode()),
    ],
)
def test_secret_contents_each_consumer_can_hold_pass(loc: tuple[str, ...], content: bytes) -> None:
    assert content_problem(loc, content) is None


@pytest.mark.parametrize(
    ("loc", "content", "problem"),
    [
        (("ddns", "password_file"), b"SECRET's", 'the secret contains "\'", which cannot be written there'),
        (("ddns", "password_file"), b"SECRET\\", "the secret contains '\\\\', which cannot be written there"),
        (("backup", "remotes", "usb", "secret_options", "key"), b"`SECRET", "the secret contains '`'"),
        (("backup", "crypt_password_file"), b"SECRET\nb", "the secret file holds more than one line"),
        (("backup", "crypt_password_file"), b"\r\n", "the secret file is empty"),
        (("backup", "crypt_password_file"), b"SECRET\x00y", "the secret file contains a control character"),
        (("backup", "crypt_password_file"), b"SECRET\xff", "the secret file is not UTF-8 text"),
    ],
)
def test_secret_contents_refused_never_quote_the_secret(loc: tuple[str, ...], content: bytes, problem: str) -> None:
    found = content_problem(loc, content)
    assert found is not None and found.startswith(problem)
    assert "SECRET" not in found


def test_a_schedule_is_checked_when_written(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"homelab.yaml:11: backup.schedule: '\*-\*-\* 24:00' is not"):
        _load(tmp_path, "backup:\n  remotes:\n    usb: {type: local, path: /mnt/usb}\n  schedule: '*-*-* 24:00'\n")
