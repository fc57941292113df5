"""YAML output for compose and provisioning files: block style, stable key order, and every string
that YAML 1.1 would read as a bool/number/null quoted (compose still parses 'on'/'yes' as booleans)."""

from __future__ import annotations

import re
from typing import Any

import yaml

from homelab.yamlio import SafeDumper

_NEEDS_QUOTES = re.compile(
    r"^(y|Y|yes|Yes|YES|n|N|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF|null|Null|NULL|~|"
    r"[-+]?[0-9][0-9_:.eE+-]*|\.inf|\.nan|)$"
)


def _str(value: str) -> yaml.ScalarNode:
    if "\n" in value:
        return yaml.ScalarNode("tag:yaml.org,2002:str", value, style="|")
    return yaml.ScalarNode("tag:yaml.org,2002:str", value, style='"' if _NEEDS_QUOTES.match(value) else None)


class _Dumper(SafeDumper):  # libyaml's emitter when present
    """The plain data renderers produce (dicts, lists, strings), represented without PyYAML's generic
    per-value dispatch (half of the time `render` spent writing YAML); the same nodes, so the same bytes:
    block style (dump's default_flow_style=False), keys in insertion order (sort_keys=False), and a dict
    or list that appears twice still becomes an anchor and an alias. Other values go the generic way."""

    def represent_data(self, data: Any) -> yaml.Node:
        kind = type(data)
        if kind is str:
            return _str(data)
        if kind is not dict and kind is not list:
            return super().represent_data(data)
        node = self.represented_objects.get(id(data))
        if node is not None:
            return node
        self.object_keeper.append(data)  # keeps id(data) unique while this document is represented
        if kind is dict:
            node = self.represented_objects[id(data)] = yaml.MappingNode("tag:yaml.org,2002:map", [], flow_style=False)
            node.value = [(self.represent_data(k), self.represent_data(v)) for k, v in data.items()]
        else:
            node = self.represented_objects[id(data)] = yaml.SequenceNode("tag:yaml.org,2002:seq", [], flow_style=False)
            node.value = [self.represent_data(item) for item in data]
        return node


def dump(data: Any, header: str | None = None) -> str:
    text = yaml.dump(data, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=120, allow_unicode=True)
    return f"# {header}\n{text}" if header else text


def escape_compose(value: str) -> str:
    """Compose interpolates $VAR: a literal dollar must be written $$."""
    return value.replace("$", "$$")
