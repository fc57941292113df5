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


def test_sso_bypass_table_is_the_one_the_edges_render() -> None:
    """docs/sso.md lists exactly the paths homelab/sso_routes.py hands both edges, with the reason."""
    from homelab.sso_routes import BYPASS

    text = (REPO / "docs" / "sso.md").read_text()
    rows = [line for line in text.splitlines() if line.startswith("| ") and line.count("`") == 2]
    documented = [row for row in rows if row.split(" | ")[0][2:] in BYPASS]
    expected = [
        "| {} | `{}` | {} |".format(app, pattern.replace("|", "\\|"), why)
        for app, entries in BYPASS.items()
        for pattern, why in entries
    ]
    assert documented == expected
