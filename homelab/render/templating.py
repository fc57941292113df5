"""Jinja for line-oriented formats only (nginx.conf, collectd.conf, ddclient.conf, shell): StrictUndefined."""

from __future__ import annotations

import contextlib
import functools
import sys
from pathlib import Path
from typing import Any

import jinja2

from homelab.render.rendering import GENERATED_MARK


class _PycacheBytecodeCache(jinja2.FileSystemBytecodeCache):
    """Compiled templates kept where Python keeps this package's compiled modules: parsing and compiling
    the templates one render uses took about 20 ms of every `render` and `plan`. An entry carries its
    template's checksum and the Python version, so a changed template is compiled again. As for Python's
    own .pyc files, one that cannot be written (a read-only install, PYTHONDONTWRITEBYTECODE) only costs
    the compile again."""

    def __init__(self) -> None:
        super().__init__(str(Path(__file__).parent / "__pycache__"), "templates.%s.jinja")

    def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        with contextlib.suppress(OSError):  # as if empty (jinja forgives only a missing or unreadable file)
            super().load_bytecode(bucket)

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        if sys.dont_write_bytecode:
            return
        with contextlib.suppress(OSError):
            Path(self.directory).mkdir(exist_ok=True)
            super().dump_bytecode(bucket)  # a temporary file renamed into place: parallel runs are safe


@functools.cache
def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("homelab.render", "templates"),
        bytecode_cache=_PycacheBytecodeCache(),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,  # noqa: S701 - config files, not HTML
    )


def render_template(name: str, **context: Any) -> str:
    return _environment().get_template(name).render(generated_mark=GENERATED_MARK, **context)
