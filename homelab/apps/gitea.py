"""Gitea: sign-up closed unless the config opens it; the site admin its first start creates."""

from __future__ import annotations

from homelab.plan_model import AppContext


def customize(ctx: AppContext) -> None:
    gitea, service = ctx.config.apps.gitea, ctx.services["gitea"]
    service.environment["GITEA__service__DISABLE_REGISTRATION"] = str(not gitea.open_registration).lower()
    service.environment["HOMELAB_ADMIN_USER"] = gitea.admin_user
    service.environment["HOMELAB_ADMIN_EMAIL"] = ctx.config.domain.acme.email
