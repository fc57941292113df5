"""The smartctl driver: the real smartctl's answer for a device without SMART, the fake's answers for
disks with it (smartmontools' JSON format), and an absent smartctl (unknown, not "no SMART")."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from homelab.runtime.smart import Smartctl, supported
from tests.fakes.smart import answer


@pytest.mark.real
def test_the_real_smartctl_says_a_device_without_smart_has_none(require_program: Callable[[str], str]) -> None:
    program = require_program("smartctl")
    assert Smartctl(program).supports("null") is False  # /dev/null: "Unable to detect device type"


@pytest.mark.real
def test_the_fakes_no_smart_answer_has_the_real_shape(require_program: Callable[[str], str]) -> None:
    import subprocess

    real = json.loads(
        subprocess.run([require_program("smartctl"), "-i", "-j", "/dev/null"], capture_output=True, text=True,
                       errors="replace", check=False).stdout
    )  # fmt: skip
    fake = json.loads(answer("null", "unknown-device"))
    assert real.keys() >= fake.keys() and "smart_support" not in real
    assert real["smartctl"]["messages"] == fake["smartctl"]["messages"]
    assert real["smartctl"]["exit_status"] == fake["smartctl"]["exit_status"]


def test_supported_reads_smart_support_and_nvme() -> None:
    assert supported(answer("sda", "ata")) is True
    assert supported(answer("sda", "disabled")) is False  # available but switched off: nothing to read
    assert supported(answer("nvme0n1", "nvme")) is True
    assert supported(answer("sdz", "unknown-device")) is False
    assert supported("") is None and supported("smartctl: command not found") is None


def test_a_missing_smartctl_is_unknown() -> None:
    assert Smartctl("/nonexistent/smartctl").supports("sda") is None
