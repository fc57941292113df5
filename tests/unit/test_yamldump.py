"""The YAML writer's own representer gives the bytes PyYAML's generic one gives (the golden files prove
it on the example; these are the cases the example lacks)."""

from __future__ import annotations

from typing import Any

import yaml

from homelab.render import yamldump


class _Generic(yamldump.SafeDumper):
    pass


def _generic_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else '"' if yamldump._NEEDS_QUOTES.match(value) else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Generic.add_representer(str, _generic_str)


def _generic(data: Any) -> str:
    return yaml.dump(data, Dumper=_Generic, sort_keys=False, default_flow_style=False, width=120, allow_unicode=True)


def test_the_same_bytes_as_pyyamls_representer() -> None:
    shared = {"a": ["x", {"deep": "on"}]}
    data = {
        "one": shared,
        "two": shared,  # the same dict twice: an anchor and an alias, as PyYAML writes it
        "lists": [shared["a"], shared["a"]],
        "scalars": [None, True, False, 0, -3, 1.5, "yes", "8080", "", "~", "a\nb\n", "é", "$$HOME"],
        "empty": [{}, []],
        "z": "last",
        1: "an int key",
    }
    assert yamldump.dump(data) == _generic(data)
    assert yamldump.dump(data, "header") == "# header\n" + _generic(data)
