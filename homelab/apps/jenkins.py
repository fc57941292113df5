"""Jenkins: the inbound agent port, published only when the config names a host port for it."""

from __future__ import annotations

from homelab.plan_model import AppContext


def customize(ctx: AppContext) -> None:
    if ctx.config.apps.jenkins.agent_port:
        ctx.services["jenkins"].ports.append(f"{ctx.config.apps.jenkins.agent_port}:50000")
