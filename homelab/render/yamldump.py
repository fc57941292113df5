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


class _Dumper(SafeDumper):  # libyaml's emitter when present
    pass


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    if "\n" in value:
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|")
    style = '"' if _NEEDS_QUOTES.match(value) else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def dump(data: Any, header: str | None = None) -> str:
    text = yaml.dump(data, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=120, allow_unicode=True)
    return f"# {header}\n{text}" if header else text


def escape_compose(value: str) -> str:
    """Compose interpolates $VAR: a literal dollar must be written $$."""
    return value.replace("$", "$$")
