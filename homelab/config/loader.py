"""Load homelab.yaml: YAML with line numbers -> Config, every problem as `file:line: key.path: message`."""

from __future__ import annotations

import difflib
import json
import re
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from homelab.config import yamlsafe
from homelab.config.loaded import LoadedConfig, Loc, line_of
from homelab.config.models import Config
from homelab.errors import ConfigError

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


_LEADING_ZERO = re.compile(r"[-+]?0[0-9_]+")


def _control_problem(node: yaml.Node, loc: Loc) -> str | None:
    """Every string in homelab.yaml lands in some config file or command line, where a line break or
    other control character would start a new line or option: refused in keys and values alike. A plain
    number with a leading zero is octal to YAML 1.1 (`0443` is 291) and decimal to YAML 1.2: refused too."""
    if not isinstance(node, yaml.ScalarNode):
        return None
    if node.tag == "tag:yaml.org,2002:int" and _LEADING_ZERO.fullmatch(node.value):
        return f"{_dotted(loc)}: {node.value} has a leading zero (YAML reads 0443 as octal 291); write it without"
    found = _CONTROL.search(node.value)
    if found is None:
        return None
    return f"{_dotted(loc)}: contains a control character (U+{ord(found.group()):04X}); values end up in config files"


def _line_index(node: yaml.Node, loc: Loc, index: dict[Loc, int], problems: list[str], name: str) -> None:
    """Record the line of every key (and list item) so validation errors can point at it; refuse
    duplicate keys (a silent override is a classic homelab.yaml bug) and control characters."""
    index[loc] = node.start_mark.line + 1
    control = _control_problem(node, loc)
    if control:
        problems.append(f"{name}:{node.start_mark.line + 1}: {control}")
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            key, line = key_node.value, key_node.start_mark.line + 1
            here = (*loc, key if isinstance(key, str) else str(key))
            if isinstance(key, str) and key in seen:
                problems.append(f"{name}:{line}: {_dotted(here)}: duplicate key (first set on line {seen[key]})")
            elif isinstance(key, str):
                seen[key] = line
            key_control = _control_problem(key_node, here)
            if key_control:
                problems.append(f"{name}:{line}: {key_control}")
            _line_index(value_node, here, index, problems, name)
            index[here] = line
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _line_index(item, (*loc, i), index, problems, name)


def _model_at(loc: Loc, root: type[BaseModel]) -> type[BaseModel] | None:
    """The pydantic model that describes the mapping at `loc` (for did-you-mean on unknown keys)."""
    model: Any = root
    parts = list(loc)
    while parts:
        part = parts.pop(0)
        if isinstance(part, int) or not (isinstance(model, type) and issubclass(model, BaseModel)):
            return None
        field = model.model_fields.get(part)
        if field is None:
            return None
        model = _unwrap_model(field.annotation)
        if typing.get_origin(model) is dict:
            if not parts:
                return None
            parts.pop(0)  # dict[str, Model]: the key is a free name, the value is the model
            model = _unwrap_model(typing.get_args(model)[1])
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


def _message(error: Any, root: type[BaseModel] = Config) -> str:
    kind = error["type"]
    loc: Loc = tuple(error["loc"])
    if kind == "extra_forbidden":
        model = _model_at(loc[:-1], root)
        known = list(model.model_fields) if model else []
        close = difflib.get_close_matches(str(loc[-1]), known, n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]!r}?)" if close else f" (known: {', '.join(known)})" if known else ""
        return f"unknown key{hint}"
    if kind == "missing":
        return "required key is missing"
    msg: str = error["msg"]
    for prefix in ("Value error, ", "Assertion failed, "):
        msg = msg.removeprefix(prefix)
    if kind == "literal_error":
        msg = msg.replace("Input should be", "must be")
    if kind == "int_type" and isinstance(error.get("input"), bool | str):  # a port: `true` or "0443"
        return f"must be a whole number written without quotes, not {json.dumps(error['input'])}"
    return msg


def _clean_loc(loc: Loc) -> Loc:
    # pydantic adds function names for Annotated validators and union members; users never wrote them
    return tuple(p for p in loc if not (isinstance(p, str) and ("[" in p or p.startswith("function-"))))


M = TypeVar("M", bound=BaseModel)


def parse_model(path: Path, model: type[M], *, missing: str, empty: str | None = None) -> tuple[M, dict[Loc, int]]:
    """Read a YAML file homelab reads (homelab.yaml, the sensor inventory) and validate it against
    `model`: bounded YAML, no control characters or duplicate keys, every problem as `file:line:
    key.path: message`. `missing` is the hint for an absent file; `empty` the error for an empty one
    (None: an empty file is an empty mapping). Returns the model and the line of every key."""
    name = str(path)
    index: dict[Loc, int] = {}
    problems: list[str] = []

    def inspect(node: yaml.Node) -> None:
        _line_index(node, (), index, problems, name)
        if problems:
            raise ConfigError(problems)

    node, data = yamlsafe.compose(yamlsafe.read(path, name, missing), name, inspect)
    if node is None and empty is not None:
        raise ConfigError([f"{name}:1: {empty}"])
    data = {} if node is None else data
    if not isinstance(data, dict):
        raise ConfigError([f"{name}:1: expected a mapping of settings, got {type(data).__name__}"])
    try:
        return model.model_validate(data), index
    except ValidationError as exc:
        for error in exc.errors():
            loc = _clean_loc(tuple(error["loc"]))
            problems.append(f"{name}:{line_of(loc, index)}: {_dotted(loc)}: {_message(error, model)}")
        raise ConfigError(problems) from None


def load(path: Path | str) -> LoadedConfig:
    """Read, parse and validate a config file, then check cross-field rules and secret files."""
    from homelab.config.cabundle import ca_bundle_problems
    from homelab.config.checks import cross_field_problems, folder_problems
    from homelab.config.secretfiles import secret_file_problems

    path = Path(path)
    config, index = parse_model(
        path,
        Config,
        missing="create one with `homelab init`",
        empty="the file is empty (expected `version: 1` and the server settings)",
    )
    loaded = LoadedConfig(config, path.resolve(), index)
    problems = [
        f"{path}:{line_of(loc, index)}: {_dotted(loc)}: {message}"
        for loc, message in (
            *cross_field_problems(config, index.__contains__),
            *folder_problems(config, loaded.base_dir),
            *secret_file_problems(loaded),
            *ca_bundle_problems(loaded),
        )
    ]
    if problems:
        raise ConfigError(problems)
    return loaded
