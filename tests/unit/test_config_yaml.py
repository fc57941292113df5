"""The YAML layer of the loader: bombs refused while composing (bounded work, not a wall clock), the
aliases a person writes still work, errors at the cause's line, the size limit at its edge."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest
import yaml

from homelab.config import yamlsafe
from homelab.config.loader import load
from homelab.errors import ConfigError

BASE = "version: 1\nserver:\n  hostname: nas\ndomain:\n  name: example.com\n  acme:\n    email: admin@example.com\n"


def _problems(tmp_path: Path, text: str | bytes) -> list[str]:
    path = tmp_path / "homelab.yaml"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load(path)
    return [p.replace(f"{path}:", "L") for p in caught.value.problems]


def _laughs(levels: int) -> str:
    lines = ["l0: &l0 [" + ",".join(['"lol"'] * 9) + "]"]
    lines += [f"l{i}: &l{i} [" + ",".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, levels)]
    return BASE + "\n".join(lines) + "\n"


def test_an_alias_bomb_is_refused_after_composing_each_written_value_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 9**60 values if expanded. The work done is counted, not timed: every value written in the file
    # is composed once (about 10 per line), so the loader stops long before any expansion.
    composed = 0
    compose_node = yamlsafe._BoundedComposer.compose_node

    def counting(self: yamlsafe._BoundedComposer, parent: yaml.Node | None, index: object) -> yaml.Node | None:
        nonlocal composed
        composed += 1
        return compose_node(self, parent, index)

    monkeypatch.setattr(yamlsafe._BoundedComposer, "compose_node", counting)
    tracemalloc.start()
    try:
        problems = _problems(tmp_path, _laughs(60))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert problems == [
        "L12: invalid YAML: alias *l3 expands the document to more than 20000 values (the limit for homelab.yaml)"
    ]
    assert composed < 200
    assert peak < 64 * 1024 * 1024  # generous: an expansion would need terabytes


def test_cycles_are_refused(tmp_path: Path) -> None:
    assert _problems(tmp_path, BASE + "x: &x [1, [2, *x]]\n") == [
        "L8: invalid YAML: alias *x refers to a value that contains it (a cycle)"
    ]
    assert _problems(tmp_path, BASE + "x: &x\n  a: 1\n  b:\n    c: *x\n") == [
        "L11: invalid YAML: alias *x refers to a value that contains it (a cycle)"
    ]


def test_aliases_and_merge_keys_a_person_writes_still_work(tmp_path: Path) -> None:
    text = BASE + (
        "backup:\n"
        "  remotes:\n"
        "    usb: &remote {type: local, path: /mnt/usb/a}\n"
        "    usb2:\n"
        "      <<: *remote\n"
        "      path: /mnt/usb/b\n"
        "  retention: &keep {hourly: 1, daily: 2, monthly: 3}\n"
    )
    (tmp_path / "homelab.yaml").write_text(text)
    config = load(tmp_path / "homelab.yaml").config
    assert config.backup is not None
    assert config.backup.remotes["usb2"].type == "local"
    assert config.backup.remotes["usb2"].path == "/mnt/usb/b"
    assert config.backup.retention.daily == 2


def test_the_same_value_shared_many_times_under_the_limit_is_fine(tmp_path: Path) -> None:
    text = (
        BASE + "edge:\n  lan_cidrs: &nets [10.0.0.0/8, 192.168.0.0/16]\n" + "".join(f"x{i}: *nets\n" for i in range(3))
    )
    # only the unknown keys are wrong: the aliases themselves are accepted
    assert _problems(tmp_path, text) == [f"L{10 + i}: x{i}: unknown key" + _known_top() for i in range(3)]


def _known_top() -> str:
    from homelab.config.models import Config

    return f" (known: {', '.join(Config.model_fields)})"


def test_nesting_is_bounded(tmp_path: Path) -> None:
    assert _problems(tmp_path, BASE + "x: " + "[" * 63 + "]" * 63 + "\n")[0] == "L8: x: unknown key" + _known_top()
    assert _problems(tmp_path, BASE + "x: " + "[" * 64 + "]" * 64 + "\n") == [
        "L8: invalid YAML: values nested deeper than 64 levels"
    ]


def test_the_size_limit_is_checked_before_parsing(tmp_path: Path) -> None:
    filler = "# " + "x" * 98 + "\n"
    at_limit = BASE + filler * ((yamlsafe.MAX_BYTES - len(BASE)) // len(filler))
    at_limit += "#" * (yamlsafe.MAX_BYTES - len(at_limit) - 1) + "\n"
    assert len(at_limit.encode()) == yamlsafe.MAX_BYTES == 256 * 1024
    (tmp_path / "homelab.yaml").write_text(at_limit)
    load(tmp_path / "homelab.yaml")
    path = tmp_path / "homelab.yaml"
    path.write_text(at_limit + "\n")
    with pytest.raises(ConfigError) as caught:
        load(path)
    assert caught.value.problems == [f"{path}: the file is larger than 256 KiB (the limit for homelab.yaml)"]


def test_an_unclosed_quote_is_reported_where_it_opens_not_at_the_end(tmp_path: Path) -> None:
    lines = BASE.splitlines() + [f"# comment {i}" for i in range(64)] + ["edge:", '  kind: "traefik']
    lines += [f"  # more {i}" for i in range(40)]
    assert len(BASE.splitlines()) + 64 + 2 == 73
    assert _problems(tmp_path, "\n".join(lines) + "\n") == [
        "L73: invalid YAML: a quoted string starts here and is never closed"
    ]


def test_a_byte_that_is_not_utf8_is_reported_at_its_line(tmp_path: Path) -> None:
    assert _problems(tmp_path, BASE.encode() + b"edge:\n  kind: tr\xe4efik\n") == ["L9: not UTF-8 text (byte 0xe4)"]


def test_a_nul_byte_is_reported_at_its_line(tmp_path: Path) -> None:
    assert _problems(tmp_path, BASE + "edge:\n  kind: tra\0efik\n") == [
        "L9: invalid YAML: unacceptable character #x0000"
    ]


def _compose(text: str) -> tuple[yaml.Node | None, object]:
    return yamlsafe.compose(text, "homelab.yaml", lambda node: None)


def test_libyaml_parses_the_files_it_accepts(monkeypatch: pytest.MonkeyPatch) -> None:
    # the speed of `homelab validate` rests on libyaml (PyYAML wheels bundle it)
    assert yaml.__with_libyaml__ and yamlsafe.CParser is not None
    text = (Path(__file__).parents[2] / "examples" / "homelab.yaml").read_text()
    node, data = _compose(text)
    assert node is not None
    monkeypatch.setattr(yamlsafe, "CParser", None)  # the pure-Python parser alone
    python_node, python_data = _compose(text)
    assert data == python_data
    assert _marks(node) == _marks(python_node)  # the lines errors are reported at


def _marks(node: yaml.Node | None) -> list[tuple[int, int]]:
    assert node is not None
    children: list[yaml.Node] = []
    if isinstance(node, yaml.MappingNode):
        children = [n for pair in node.value for n in pair]
    elif isinstance(node, yaml.SequenceNode):
        children = node.value
    return [(node.start_mark.line, node.start_mark.column)] + [m for child in children for m in _marks(child)]


def test_what_libyaml_refuses_is_decided_and_worded_by_pyyaml() -> None:
    # libyaml refuses a YAML 1.3 directive that PyYAML accepts: PyYAML's answer is the one given
    assert _compose("%YAML 1.3\n---\na: 1\n")[1] == {"a": 1}
    # and its wording: libyaml would say "did not find expected key"
    with pytest.raises(ConfigError) as caught:
        _compose("a:\n  b: 1\n c: 2\n")
    assert caught.value.problems == [
        "homelab.yaml:3: invalid YAML: parsing a block mapping: expected <block end>, but found '<block mapping start>'"
    ]
