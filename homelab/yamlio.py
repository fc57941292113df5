"""YAML in and out through libyaml's C parser and emitter when PyYAML was built with it (about 8x faster:
`homelab validate` reads a dozen files, `render` writes a dozen), the pure-Python ones otherwise. Same safe
tag set, same output (the golden files are byte-identical either way)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:  # the C classes have the same interface; type-check against the Python ones
    from yaml import SafeDumper as SafeDumper
    from yaml import SafeLoader as SafeLoader
else:
    SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    SafeDumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def safe_load(text: str) -> Any:
    return yaml.load(text, Loader=SafeLoader)  # noqa: S506 - a safe loader
