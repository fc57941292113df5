"""The plugin names the series catalog expects are the ones homelab's collectd plugins dispatch under: the
plugin files run standalone inside the collectd image, so each keeps its own copy."""

from __future__ import annotations

from pathlib import Path

from homelab.collectd_plugins import bmc_states, containers
from homelab.monitoring import plugins


def test_the_catalog_names_each_plugin_as_the_plugin_file_does() -> None:
    assert (plugins.STATE_PLUGIN, plugins.SEL_PLUGIN) == (bmc_states.PLUGIN, bmc_states.SEL_PLUGIN)
    assert plugins.CONTAINER_PLUGIN == containers.PLUGIN


def test_the_plugin_files_import_nothing_of_homelab() -> None:
    for module in (bmc_states, containers):
        source = Path(module.__file__ or "").read_text(encoding="utf-8")
        assert "import homelab" not in source and "from homelab" not in source, module.__name__
