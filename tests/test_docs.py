"""The generated references match the code (regenerate: python -m homelab.reference)."""

from __future__ import annotations

from homelab import reference
from tests.conftest import REPO


def test_config_reference_is_current() -> None:
    assert (REPO / "docs" / "config-reference.md").read_text() == reference.config_reference()


def test_cli_reference_is_current() -> None:
    assert (REPO / "docs" / "cli-reference.md").read_text() == reference.cli_reference()


def test_every_config_key_is_documented() -> None:
    text = (REPO / "docs" / "config-reference.md").read_text()
    assert "|  |" not in text.replace("| `null` |", ""), "a field has no description"
