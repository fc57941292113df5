"""Load homelab.yaml: YAML with line numbers -> Config, every problem as `file:line: key.path: message`."""

from __future__ import annotations

import difflib
import stat
import types
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from homelab.config.models import Config
from homelab.errors import ConfigError

Loc = tuple[str | int, ...]


@dataclass(frozen=True)
class LoadedConfig:
    """A validated config and where it came from (secret paths are relative to its folder)."""

    config: Config
    path: Path

    @property
    def base_dir(self) -> Path:
        return self.path.parent

    def secret_path(self, relative: str) -> Path:
        return (self.base_dir / relative).resolve()


class _LineLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys (a silent override is a classic homelab.yaml bug)."""


def _compose(text: str, name: str) -> yaml.Node | None:
    try:
        return yaml.compose(text, Loader=_LineLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else 1
        raise ConfigError([f"{name}:{line}: invalid YAML: {exc.problem or exc.context}"]) from None


def _line_index(node: yaml.Node, loc: Loc, index: dict[Loc, int], problems: list[str], name: str) -> None:
    """Record the line of every key (and list item) so validation errors can point at it."""
    index[loc] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            key, line = key_node.value, key_node.start_mark.line + 1
            if key in seen:
                dotted = ".".join(str(p) for p in (*loc, key))
                problems.append(f"{name}:{line}: {dotted}: duplicate key (first set on line {seen[key]})")
            seen.setdefault(key, line)
            _line_index(value_node, (*loc, key), index, problems, name)
            index[(*loc, key)] = key_node.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _line_index(item, (*loc, i), index, problems, name)


def _line_of(loc: Loc, index: dict[Loc, int]) -> int:
    while loc not in index and loc:
        loc = loc[:-1]
    return index.get(loc, 1)


def _model_at(loc: Loc) -> type[BaseModel] | None:
    """The pydantic model that describes the mapping at `loc` (for did-you-mean on unknown keys)."""
    model: Any = Config
    for part in loc:
        if isinstance(part, int) or model is None:
            return None
        field = model.model_fields.get(part) if isinstance(model, type) and issubclass(model, BaseModel) else None
        if field is None:
            # dict[str, Model]: the key is a free name, the value is the model
            return None
        model = _unwrap_model(field.annotation)
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def _unwrap_model(annotation: Any) -> Any:
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            if arg is not type(None):
                return _unwrap_model(arg)
    return annotation


def _dotted(loc: Loc) -> str:
    return ".".join(str(p) for p in loc) or "(top level)"


def _message(error: Any) -> str:
    kind = error["type"]
    loc: Loc = tuple(error["loc"])
    if kind == "extra_forbidden":
        model = _model_at(loc[:-1])
        known = list(model.model_fields) if model else []
        close = difflib.get_close_matches(str(loc[-1]), known, n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        return f"unknown key{hint}"
    if kind == "missing":
        return "required key is missing"
    msg: str = error["msg"]
    for prefix in ("Value error, ", "Assertion failed, "):
        msg = msg.removeprefix(prefix)
    if kind == "literal_error":
        msg = msg.replace("Input should be", "must be")
    return msg


def _clean_loc(loc: Loc) -> Loc:
    # pydantic adds function names for Annotated validators and union members; users never wrote them
    return tuple(p for p in loc if not (isinstance(p, str) and ("[" in p or p.startswith("function-"))))


def load(path: Path | str) -> LoadedConfig:
    """Read, parse and validate a config file, then check cross-field rules and secret files."""
    path = Path(path)
    name = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError([f"{name}: no such file (create one with `homelab init`)"]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError([f"{name}: cannot read: {exc}"]) from None

    node = _compose(text, name)
    if node is None:
        raise ConfigError([f"{name}:1: the file is empty (expected `version: 1` and the server settings)"])
    index: dict[Loc, int] = {}
    problems: list[str] = []
    _line_index(node, (), index, problems, name)
    if problems:
        raise ConfigError(problems)
    data = yaml.load(text, Loader=_LineLoader)  # noqa: S506 - SafeLoader subclass
    if not isinstance(data, dict):
        raise ConfigError([f"{name}:1: expected a mapping of settings, got {type(data).__name__}"])

    try:
        config = Config.model_validate(data)
    except ValidationError as exc:
        for error in exc.errors():
            loc = _clean_loc(tuple(error["loc"]))
            problems.append(f"{name}:{_line_of(loc, index)}: {_dotted(loc)}: {_message(error)}")
        raise ConfigError(problems) from None

    loaded = LoadedConfig(config, path.resolve())
    for loc, message in (*_cross_field_problems(config, index.__contains__), *_secret_file_problems(loaded)):
        problems.append(f"{name}:{_line_of(loc, index)}: {_dotted(loc)}: {message}")
    if problems:
        raise ConfigError(problems)
    return loaded


def _cross_field_problems(config: Config, written: Callable[[Loc], bool]) -> Iterator[tuple[Loc, str]]:
    """Rules across sections; each problem is reported at a key the user actually wrote."""
    from homelab.catalog import app_names
    from homelab.profiles import available

    if config.server.profile not in available():
        yield (
            ("server", "profile"),
            f"unknown hardware profile {config.server.profile!r} (known: {', '.join(available())})",
        )
    if config.edge.kind == "nginx" and config.domain.acme.challenge != "http":
        yield (
            ("domain", "acme", "challenge"),
            (
                f"the nginx edge gets certificates with certbot's webroot: use challenge 'http', "
                f"not {config.domain.acme.challenge!r}"
            ),
        )

    taken: dict[str, str] = {}
    hosts: list[tuple[Loc, str, str]] = [(("monitoring", "subdomain"), "monitoring", config.monitoring.subdomain)]
    for app in app_names():
        settings = getattr(config.apps, app)
        if settings.enabled:
            hosts.append((("apps", app, "subdomain"), app, settings.subdomain or app))
    if not config.monitoring.enabled:
        hosts.pop(0)
    for loc, owner, label in hosts:
        if label in taken:
            yield loc, f"subdomain {label!r} is already used by {taken[label]}"
        taken[label] = owner

    used: dict[int, str] = {}
    for key, port in config.published_ports():
        if port in used:
            first, second = used[port], key
            if not written(tuple(second.split("."))):
                first, second = second, first
            yield tuple(second.split(".")), f"port {port} is already used by {first}"
        used[port] = key


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


def _secret_file_problems(loaded: LoadedConfig) -> Iterator[tuple[Loc, str]]:
    for loc, relative in secret_refs(loaded.config):
        path = loaded.secret_path(relative)
        try:
            info = path.stat()
        except FileNotFoundError:
            yield loc, f"secret file {relative!r} does not exist"
            continue
        except OSError as exc:
            yield loc, f"secret file {relative!r} cannot be read: {exc.strerror}"
            continue
        if not stat.S_ISREG(info.st_mode):
            yield loc, f"secret file {relative!r} is not a regular file"
        elif info.st_mode & 0o077:
            yield (
                loc,
                (
                    f"secret file {relative!r} is readable by others (mode {stat.S_IMODE(info.st_mode):04o}); "
                    f"run: chmod 600 {relative}"
                ),
            )
