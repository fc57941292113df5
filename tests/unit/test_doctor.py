"""doctor: each check's verdict, with the real probes where the machine has them."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from homelab import doctor
from homelab.config.loader import load
from homelab.plan import build_plan


@pytest.fixture
def plan(example_config: Path, tmp_path: Path):
    storage = tmp_path / "tank"
    text = example_config.read_text().replace("mountpoint: /tank/homelab", f"mountpoint: {storage}")
    text = text.replace("http_port: 80", "http_port: 18080").replace("https_port: 443", "https_port: 18443")
    example_config.write_text(text)
    return build_plan(load(example_config))


def _by_name(checks):
    return {c.name: c for c in checks}


def test_hostnames_that_do_not_resolve_fail(plan) -> None:
    def resolve(host: str) -> None:
        if host.startswith("cloud."):
            raise socket.gaierror(-2, "Name or service not known")

    checks = _by_name(doctor._hostnames(plan, resolve))
    assert checks["cloud.example.com"].level == "fail"
    assert checks["cloud.example.com"].detail == (
        "does not resolve ([Errno -2] Name or service not known); check DNS / ddns settings"
    )
    assert checks["plex.example.com"].level == "ok"


def test_busy_port_fails(plan) -> None:
    with socket.socket() as busy:
        busy.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        busy.bind(("127.0.0.1", 18443))  # a loopback listener blocks the 0.0.0.0 probe too
        busy.listen()
        checks = _by_name(doctor._ports(plan))
    assert checks["port 18443"].level == "fail"
    assert checks["port 18443"].detail == "edge.https_port: already in use by another program"
    assert checks["port 18080"].level == "ok"


def test_acme_json_states(plan) -> None:
    path = doctor.acme_json_path(plan)
    assert path is not None
    assert next(doctor._acme(plan)).level == "warn"
    path.mkdir(parents=True)  # what Docker does with a missing bind source
    assert next(doctor._acme(plan)).level == "fail"
    path.rmdir()
    path.write_text("{}")
    path.chmod(0o644)
    check = next(doctor._acme(plan))
    assert (check.level, check.detail) == ("fail", f"{path} has mode 0644; Traefik needs 0600")
    path.chmod(0o600)
    assert next(doctor._acme(plan)).level == "ok"


def test_disk_check_reports_free_space(plan) -> None:
    check = next(doctor._disk(plan))
    assert check.name == "disk" and "GiB free" in check.detail


def test_doctor_command_runs_every_check(plan, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(doctor, "_resolve", lambda host: None)
    names = [c.name for c in doctor.run_checks(plan)]
    assert names[:2] == ["docker", "compose"]
    assert {"port 18080", "port 18443", "cloud.example.com", "acme.json", "disk"} <= set(names)
