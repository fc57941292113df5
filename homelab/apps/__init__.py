"""Per-app hooks: the few options of a catalog entry that are logic rather than data.

A catalog entry (compose/<entry>.yaml) is data first. When an option needs code (a device only when
a setting is set, a mount per configured folder, a secret passed by file), the entry gets one module
here named after it (`edge-traefik` -> `homelab/apps/edge_traefik.py`) with one function:

    def customize(ctx: AppContext) -> None

`build_plan` calls it once, after the entry's services are built from its catalog data (networks
and TCP ports included) and before secret owners are settled. An entry without a module has no hook.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from homelab.config.models import Config
    from homelab.plan_model import AppContext

Hook = Callable[["AppContext"], None]


def _module_name(entry: str) -> str:
    return f"{__name__}.{entry.replace('-', '_')}"


@functools.cache
def hook(entry: str) -> Hook | None:
    """The `customize` function of the entry's module, or None when the entry has none."""
    name = _module_name(entry)
    if importlib.util.find_spec(name) is None:
        return None
    customize: Hook = importlib.import_module(name).customize
    return customize


def web_ports(config: Config) -> list[str]:
    """The edge's published HTTP and HTTPS ports (whichever proxy it runs)."""
    return [f"{config.edge.http_port}:80", f"{config.edge.https_port}:443"]
