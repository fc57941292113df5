"""`homelab monitor snapshot`: PNG graphs of the dashboards' main panels, drawn by graphite-web.

Grafana is not needed: every panel of the rendered dashboards is a list of Graphite targets, and
graphite-web's `/render?format=png` draws them. The panels come from the same catalog-driven
dashboards the monitoring stack provisions (homelab/render/dashboards.py), so a picture shows
exactly what the dashboard asks for.
"""

from __future__ import annotations

import re
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from homelab.errors import EnvironmentProblem

# (dashboard file name, panel title): the panels a user looks at first
MAIN_PANELS: tuple[tuple[str, str], ...] = (
    ("thermals-fans", "BMC temperatures"),
    ("thermals-fans", "Fans"),
    ("server-health", "CPU temperature"),
    ("server-health", "CPU"),
    ("server-health", "Load"),
    ("disks-zfs", "Disk throughput"),
    ("network-edge", "Traffic"),
)
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
# graphite-web's renderer, made legible on a white docs page
STYLE = {
    "bgcolor": "white",
    "fgcolor": "black",
    "majorGridLineColor": "#c8c8c8",
    "minorGridLineColor": "#ececec",
    "lineWidth": "2",
    "fontSize": "10",
}
UNIT_LABELS = {
    "celsius": "°C",
    "rotrpm": "RPM",
    "volt": "V",
    "percent": "%",
    "bytes": "bytes",
    "Bps": "bytes/s",
    "iops": "ops/s",
    "pps": "packets/s",
    "watt": "W",
    "amp": "A",
    "s": "s",
}


@dataclass(frozen=True)
class PanelGraph:
    dashboard: str
    title: str
    unit: str
    targets: tuple[str, ...]

    @property
    def file_name(self) -> str:
        slug = re.sub(r"[^a-z0-9]+", "-", self.title.lower()).strip("-")
        return f"{self.dashboard}--{slug}.png"


def panel_graphs(boards: dict[str, dict[str, Any]], all_panels: bool = False) -> list[PanelGraph]:
    """The main panels (or every panel) of the dashboards, in MAIN_PANELS order."""
    found: dict[tuple[str, str], PanelGraph] = {}
    for name, board in boards.items():
        for panel in board.get("panels", []):
            targets = tuple(t["target"] for t in panel.get("targets", []) if t.get("target"))
            if not targets:
                continue
            unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "")
            found[(name, panel["title"])] = PanelGraph(name, panel["title"], unit, targets)
    if all_panels:
        return list(found.values())
    return [found[key] for key in MAIN_PANELS if key in found]


def render_png(
    graphite_url: str, graph: PanelGraph, from_: str, until: str, width: int, height: int, timeout: float = 60
) -> bytes:
    params: list[tuple[str, str]] = [("target", t) for t in graph.targets]
    params += [
        ("from", from_),
        ("until", until),
        ("width", str(width)),
        ("height", str(height)),
        ("title", graph.title),
        ("vtitle", UNIT_LABELS.get(graph.unit, graph.unit)),
        ("format", "png"),
    ]
    params += list(STYLE.items())
    url = f"{graphite_url.rstrip('/')}/render?{urllib.parse.urlencode(params)}"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - the user's graphite-web
            body = bytes(response.read())
    except (urllib.error.URLError, OSError) as exc:
        raise EnvironmentProblem(f"graphite-web at {graphite_url} did not render {graph.title!r}: {exc}") from exc
    if not body.startswith(PNG_MAGIC):
        raise EnvironmentProblem(
            f"graphite-web at {graphite_url} answered {graph.title!r} with something else than a PNG"
        )
    return body


def snapshot(
    graphite_url: str,
    boards: dict[str, dict[str, Any]],
    out: Path,
    *,
    from_: str = "-1h",
    until: str = "now",
    width: int = 800,
    height: int = 300,
    all_panels: bool = False,
) -> list[Path]:
    """Write one PNG per panel into `out`; returns the files written."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for graph in panel_graphs(boards, all_panels):
        path = out / graph.file_name
        path.write_bytes(render_png(graphite_url, graph, from_, until, width, height))
        written.append(path)
    return written
