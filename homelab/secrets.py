"""Secret values: generated once and reused, or copied from the files the user named. Never printed."""

from __future__ import annotations

import secrets as random
from pathlib import Path

from homelab.config.loader import LoadedConfig, secret_refs
from homelab.errors import ConfigError
from homelab.plan_model import Plan


def user_secret_values(loaded: LoadedConfig) -> dict[str, str]:
    """The contents of every secret file named in the config, keyed by the name as written."""
    values = {}
    for loc, relative in secret_refs(loaded.config):
        try:
            values[relative] = loaded.secret_path(relative).read_text(encoding="utf-8").rstrip("\r\n")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError([f"{'.'.join(map(str, loc))}: cannot read secret file {relative!r}: {exc}"]) from None
    return values


def generate() -> str:
    """43 URL-safe characters (256 bits): safe in env files, URLs and config lines."""
    return random.token_urlsafe(32)


def secret_contents(plan: Plan, secrets_dir: Path, rendered: dict[str, bytes]) -> dict[str, bytes]:
    """Final bytes of every secret file: rendered secret configs, copies of user files, and generated
    values (an existing file is reused, so re-rendering never rotates a password under a running app)."""
    contents: dict[str, bytes] = {}
    for name, secret in plan.secrets.items():
        if name in rendered:
            contents[name] = rendered[name]
        elif secret.source:
            contents[name] = Path(secret.source).read_bytes()
        else:
            existing = secrets_dir / name
            contents[name] = existing.read_bytes() if existing.is_file() else generate().encode()
    return contents
