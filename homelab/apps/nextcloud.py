"""Nextcloud: the first admin's name and the upload limit PHP and Apache enforce (the edge's comes from
the route)."""

from __future__ import annotations

from homelab.config.resources import size_bytes
from homelab.plan_model import AppContext


def customize(ctx: AppContext) -> None:
    nextcloud, service = ctx.config.apps.nextcloud, ctx.services["nextcloud"]
    service.environment["NEXTCLOUD_ADMIN_USER"] = nextcloud.admin_user
    service.environment["PHP_UPLOAD_LIMIT"] = nextcloud.upload_limit
    # the image's Apache caps bodies at 1 GiB (APACHE_BODY_LIMIT, bytes) unless told otherwise
    service.environment["APACHE_BODY_LIMIT"] = str(size_bytes(nextcloud.upload_limit.lower()))
