"""nodes: the swarm's nodes, their labels, and which homelab services run on each (engine: swarm)."""

from __future__ import annotations

from dataclasses import asdict

from homelab.cli.app import app
from homelab.cli.options import JsonOption
from homelab.cli.report import emit_json, print_table


@app.command()
def nodes(as_json: JsonOption = False) -> None:
    """Swarm nodes: role, state, labels (homelab.storage / homelab.edge place the services) and the
    homelab services running on each (docs/swarm.md)."""
    from homelab.engine.swarm_engine import SwarmEngine
    from homelab.engine.swarm_state import nodes as node_rows

    engine = SwarmEngine()
    engine.check()
    rows = node_rows(engine.swarm)
    if as_json:
        emit_json({"ok": True, "nodes": [asdict(r) for r in rows]})
        return
    header = ("NODE", "ROLE", "STATE", "LABELS", "SERVICES")
    print_table(
        header,
        [
            (
                r.hostname,
                r.role,
                f"{r.state}/{r.availability}",
                ",".join(f"{k}={v}" for k, v in sorted(r.labels.items())) or "-",
                ", ".join(r.services) or "-",
            )
            for r in rows
        ],
    )
