"""`homelab sso passwd USER`: hash a password (bcrypt) into the user's secret file, 0600, never echoing it."""

from __future__ import annotations

from pathlib import Path

from homelab.config.loaded import line_of
from homelab.config.loader import parse_model
from homelab.config.models import Config
from homelab.errors import ConfigError
from homelab.ownership import write_atomic

MAX_PASSWORD_BYTES = 72  # bcrypt reads no further: a longer password would be cut silently
MIN_PASSWORD_CHARS = 10


def password_file(config_path: Path, user: str) -> Path:
    """The secret file sso.users.USER.password_file names (it need not exist yet: this command makes it)."""
    config, lines = parse_model(config_path, Config, missing="create one with `homelab init`")
    if user not in config.sso.users:
        known = ", ".join(sorted(config.sso.users)) or "none"
        raise ConfigError(
            [f"{config_path}:{line_of(('sso', 'users'), lines)}: sso.users: no user {user!r} (users: {known})"]
        )
    return config_path.parent / config.sso.users[user].password_file


def password_problem(password: str) -> str | None:
    if len(password) < MIN_PASSWORD_CHARS:
        return f"the password is shorter than {MIN_PASSWORD_CHARS} characters"
    if len(password.encode()) > MAX_PASSWORD_BYTES:
        return f"the password is longer than {MAX_PASSWORD_BYTES} bytes (bcrypt would ignore the rest)"
    return None


def hash_password(password: str) -> str:
    import bcrypt

    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=12)).decode()


def write_hash(path: Path, password: str) -> None:
    """The hash, one line, in a file only its owner reads (written beside and renamed over the old one)."""
    problem = password_problem(password)
    if problem:
        raise ConfigError([f"{path}: {problem}; nothing was written"])
    write_atomic(path, (hash_password(password) + "\n").encode(), 0o600)
