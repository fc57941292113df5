"""Jinja for line-oriented formats only (nginx.conf, collectd.conf, ddclient.conf, shell): StrictUndefined."""

from __future__ import annotations

import functools
from typing import Any

import jinja2

from homelab.render import GENERATED_MARK


@functools.cache
def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("homelab.render", "templates"),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,  # noqa: S701 - config files, not HTML
    )


def render_template(name: str, **context: Any) -> str:
    return _environment().get_template(name).render(generated_mark=GENERATED_MARK, **context)
