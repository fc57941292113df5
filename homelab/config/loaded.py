"""A loaded config: the validated model, where it came from and each key's line; what the loader returns and
the checks after loading (secret files, the CA bundle) read, apart from the loader so they need not import it."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel

from homelab.config.models import Config

Loc = tuple[str | int, ...]


@dataclass(frozen=True)
class LoadedConfig:
    """A validated config and where it came from (secret paths are relative to its folder)."""

    config: Config
    path: Path
    lines: dict[Loc, int] = field(default_factory=dict, compare=False, repr=False)  # key -> its line

    @property
    def base_dir(self) -> Path:
        return self.path.parent

    def where(self, loc: Loc) -> str:
        """`file:line` of a key, for problems found after loading (e.g. the RAM budget)."""
        return f"{self.path}:{line_of(loc, self.lines)}"

    def secret_path(self, relative: str) -> Path:
        # not resolved: resolving a symlink loop raises (with the path in its message) before any check
        return self.base_dir / relative


def line_of(loc: Loc, index: dict[Loc, int]) -> int:
    while loc not in index and loc:
        loc = loc[:-1]
    return index.get(loc, 1)


def secret_refs(model: BaseModel, loc: Loc = ()) -> Iterator[tuple[Loc, str]]:
    """Every secret file path named in the config, with where it was named."""
    for field_name in type(model).model_fields:
        value = getattr(model, field_name)
        here = (*loc, field_name)
        if isinstance(value, BaseModel):
            yield from secret_refs(value, here)
        elif isinstance(value, dict):
            for key, item in value.items():
                if isinstance(item, BaseModel):
                    yield from secret_refs(item, (*here, key))
                elif field_name in ("dns_credentials", "secret_options"):
                    yield (*here, key), item
        elif field_name.endswith("_file") and isinstance(value, str):
            yield here, value
