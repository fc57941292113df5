"""The local CA's file in the edge stack (`homelab up --local`): the root Pebble's own HTTPS chains to,
which Traefik needs to reach the ACME directory (homelab/apps/local_ca.py mounts it)."""

from __future__ import annotations

from pathlib import Path

from homelab.apps.local_ca import HTTPS_ROOT
from homelab.layout import EDGE_STACK
from homelab.plan_model import Plan
from homelab.render.rendering import Rendering

PEBBLE = "pebble"  # the local CA's service (compose/local-ca.yaml)
PEBBLE_HTTPS_ROOT = Path(__file__).with_name("pebble-https-root.pem")


def render(plan: Plan, rendering: Rendering) -> None:
    edge = plan.stacks.get(EDGE_STACK)
    if edge is not None and PEBBLE in edge.services:
        rendering.add(f"{EDGE_STACK}/{HTTPS_ROOT}", PEBBLE_HTTPS_ROOT.read_bytes())
