"""Plex: the transcoding device, the claim token (by file), and the user's extra media folders."""

from __future__ import annotations

from homelab.plan_model import AppContext, Mount


def customize(ctx: AppContext) -> None:
    plex, service = ctx.config.apps.plex, ctx.services["plex"]
    if plex.transcode_device:
        service.devices.append(f"{plex.transcode_device}:{plex.transcode_device}")
    if plex.claim_token_file:
        ctx.pass_user_secret(service, "PLEX_CLAIM_FILE", "claim_token", plex.claim_token_file)
    for name, host_path in sorted(plex.media_paths.items()):
        service.mounts.append(Mount(host_path, f"/data/{name}", True))
