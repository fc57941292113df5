"""Parse homelab.yaml into a node tree in bounded time and memory, with every error at the cause's line.

A YAML alias is a reference, so a 2 KB file of nested aliases ("billion laughs") expands to billions of
values once walked, and `loop: &l [*l]` never ends. The composer here refuses both while composing:
it counts every value the document would have once aliases are expanded (each alias adds its target's
expanded size, memoised per node, so the count itself is cheap) and refuses an alias to a node still
being composed. Nesting depth is bounded too (the composer recurses).

The events come from libyaml's C parser when PyYAML has it (the pure-Python scanner and parser were most
of the time `homelab validate` spent in YAML): only composing, with the bounds above, stays in Python.
libyaml words its syntax errors differently, so a file it refuses is parsed again by the pure-Python
parser, whose messages (and context marks, see _CAUSES) are the ones users see: what is accepted and
every message is PyYAML's, libyaml only makes the accepted files fast.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from yaml.composer import Composer, ComposerError
from yaml.constructor import SafeConstructor
from yaml.parser import Parser
from yaml.reader import Reader
from yaml.resolver import Resolver
from yaml.scanner import Scanner

from homelab import files
from homelab.errors import ConfigError

CParser: Any
try:
    from yaml.cyaml import CParser  # type: ignore[attr-defined]
except ImportError:  # PyYAML built without libyaml: the pure-Python parser does all the work
    CParser = None

MAX_BYTES = 256 * 1024
# the example has about 200 values; a generous home server a few thousand
MAX_VALUES = 20_000
MAX_DEPTH = 64


class _BoundedComposer(Composer):
    """Composer that refuses alias cycles, expansion past MAX_VALUES and deep nesting. Its events come
    from whichever parser the loader class below puts after it."""

    def __init__(self) -> None:
        super().__init__()
        self._open_anchors: list[str] = []
        self._expanded: dict[int, int] = {}
        self._values = 0

    def _expanded_size(self, node: yaml.Node) -> int:
        # an acyclic graph (cycles are refused before this runs), memoised so shared nodes cost once
        size = self._expanded.get(id(node))
        if size is None:
            size = 1
            if isinstance(node, yaml.SequenceNode):
                size += sum(self._expanded_size(item) for item in node.value)
            elif isinstance(node, yaml.MappingNode):
                size += sum(self._expanded_size(k) + self._expanded_size(v) for k, v in node.value)
            self._expanded[id(node)] = size
        return size

    def _count(self, added: int, mark: Any, what: str) -> None:
        self._values += added
        if self._values > MAX_VALUES:
            raise ComposerError(None, None, f"{what} more than {MAX_VALUES} values (the limit for homelab.yaml)", mark)

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        event: yaml.Event = self.peek_event()  # type: ignore[attr-defined]
        mark: Any = event.start_mark
        if isinstance(event, yaml.AliasEvent):
            if event.anchor in self._open_anchors:
                raise ComposerError(
                    None, None, f"alias *{event.anchor} refers to a value that contains it (a cycle)", mark
                )
            node = super().compose_node(parent, index)
            assert node is not None
            self._count(self._expanded_size(node), mark, f"alias *{event.anchor} expands the document to")
            return node
        if len(self._open_anchors) >= MAX_DEPTH:
            raise ComposerError(None, None, f"values nested deeper than {MAX_DEPTH} levels", mark)
        self._count(1, mark, "the document has")
        # every level is pushed (anchored or not) so the depth is known; only real anchors can be aliased
        self._open_anchors.append(getattr(event, "anchor", None) or "")
        try:
            return super().compose_node(parent, index)
        finally:
            self._open_anchors.pop()


class _PyLoader(Reader, Scanner, Parser, _BoundedComposer, SafeConstructor, Resolver):
    """The pure-Python parser: PyYAML's messages for every file libyaml refuses."""

    def __init__(self, stream: str) -> None:
        Reader.__init__(self, stream)
        Scanner.__init__(self)
        Parser.__init__(self)
        _BoundedComposer.__init__(self)
        SafeConstructor.__init__(self)
        Resolver.__init__(self)


if CParser is not None:

    class _CLoader(_BoundedComposer, CParser, SafeConstructor, Resolver):  # type: ignore[misc]
        """libyaml's events, composed here (before CParser in the MRO, so its own unbounded C composer
        is never used)."""

        def __init__(self, stream: str) -> None:
            CParser.__init__(self, stream)
            _BoundedComposer.__init__(self)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)


# what libyaml reports for a file it cannot read or parse; composing and constructing are Python code
# either way and raise the same errors from both loaders
_SYNTAX_ERRORS = (yaml.reader.ReaderError, yaml.scanner.ScannerError, yaml.parser.ParserError)


def _line_at(text: str, index: int) -> int:
    return text.count("\n", 0, index) + 1


# Errors whose context mark is the cause (where an unclosed quote or bracket opened, where a key lacking
# its ':' started), with what to call it; elsewhere the problem mark is, and the context only describes.
_CAUSES = {
    "while scanning a quoted scalar": "a quoted string starts here and is never closed",
    "while parsing a flow sequence": "a [ starts here and is never closed",
    "while parsing a flow mapping": "a { starts here and is never closed",
    "while scanning a simple key": "this key is not followed by ':'",
}


def _yaml_problem(exc: yaml.YAMLError, text: str, name: str) -> ConfigError:
    if isinstance(exc, yaml.reader.ReaderError):
        what = f"character #x{exc.character:04x}" if isinstance(exc.character, int) else "byte"
        return ConfigError([f"{name}:{_line_at(text, exc.position)}: invalid YAML: unacceptable {what}"])
    assert isinstance(exc, yaml.MarkedYAMLError)
    problem, mark, context = exc.problem or "", exc.problem_mark, exc.context or ""
    at_end = mark is None or mark.index >= len(text.rstrip()) or "end of stream" in problem or "<stream end>" in problem
    cause = _CAUSES.get(context) or (context.removeprefix("while ") + " that starts here" if at_end else "")
    if exc.context_mark is not None and cause:
        # the parser ran on to where it gave up; the cause is what it was reading
        if at_end or mark is None:
            detail = cause  # "found unexpected end of stream" says no more than the cause
        elif context == "while scanning a simple key":
            detail = f"{cause} (noticed at line {mark.line + 1})"  # "could not find expected ':'" is the cause
        else:
            detail = f"{cause}: {problem} (noticed at line {mark.line + 1})"
        return ConfigError([f"{name}:{exc.context_mark.line + 1}: invalid YAML: {detail}"])
    line = mark.line + 1 if mark is not None else 1
    detail = f"{context.removeprefix('while ')}: {problem}" if context and problem else context or problem
    return ConfigError([f"{name}:{line}: invalid YAML: {detail}"])


def read(path: Path, name: str, missing: str) -> str:
    """The file's text (a regular file of at most MAX_BYTES: homelab/files.py), naming the line of a
    byte that is not UTF-8."""
    try:
        raw = files.read_bytes(path, MAX_BYTES)
    except files.Unreadable as exc:
        if exc.kind == "missing":
            raise ConfigError([f"{name}: no such file ({missing})"]) from None
        if exc.kind == "too_large":
            limit = f"the file is larger than {MAX_BYTES // 1024} KiB (the limit for homelab.yaml)"
            raise ConfigError([f"{name}: {limit}"]) from None
        raise ConfigError([f"{name}: cannot read: {exc.reason}"]) from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise ConfigError([f"{name}:{line}: not UTF-8 text (byte 0x{raw[exc.start]:02x})"]) from None


def compose(text: str, name: str, inspect: Callable[[yaml.Node], None]) -> tuple[yaml.Node | None, Any]:
    """The node tree (for line numbers) and the plain data built from that same tree. `inspect` sees the
    tree before construction: building the data applies merge keys (`<<: *base`) to the nodes in place."""
    if CParser is not None:
        try:
            return _compose_with(_CLoader, text, inspect)
        except _SYNTAX_ERRORS:
            pass  # in libyaml's words: parsed again below for PyYAML's message and mark
        except yaml.YAMLError as exc:
            raise _yaml_problem(exc, text, name) from None
    try:
        return _compose_with(_PyLoader, text, inspect)
    except yaml.YAMLError as exc:
        raise _yaml_problem(exc, text, name) from None


def _compose_with(
    loader_class: type[_BoundedComposer], text: str, inspect: Callable[[yaml.Node], None]
) -> tuple[yaml.Node | None, Any]:
    loader: Any = loader_class(text)  # type: ignore[call-arg]  # both readers check every character here
    try:
        node = loader.get_single_node()
        if node is None:
            return None, None
        inspect(node)
        # built from the composed tree: shared (aliased) values are built once, not re-expanded
        return node, loader.construct_document(node)
    finally:
        loader.dispose()
