"""Secret files named in homelab.yaml, checked at load (so `validate` catches them) for what their
consumer can hold. Neither a secret's content nor the path given to a `*_file` key is ever put in a
message: a password pasted where its file name belongs must not be echoed back."""

from __future__ import annotations

import re
import stat
from collections.abc import Iterator

from homelab import files
from homelab.config.loaded import LoadedConfig, Loc, secret_refs

MAX_SECRET_BYTES = 64 * 1024
# A user's password file holds what `homelab sso passwd` writes: a bcrypt hash, never the password
HASH_KEY = "sso.users.*.password_file"
BCRYPT_HASH = re.compile(r"\$2[aby]\$(0[4-9]|[12][0-9]|3[01])\$[./A-Za-z0-9]{53}")
# Characters a consumer cannot hold, by where the secret is written (the key's dotted path, `*` for a
# free name). ddclient.conf quotes the password in '...' (the renderer refuses ' and \ there too);
# rclone.conf reads a leading backquote or triple quote as quoting (checked with rclone 1.6x). collectd's
# ipmi block escapes " and \, so the BMC password may hold them.
_FORBIDDEN: dict[str, tuple[str, str]] = {
    "ddns.password_file": ("'\\", "ddclient.conf quotes it in '...'"),
    "backup.remotes.*.secret_options.*": ('"`', "rclone.conf reads quotes as quoting"),
}


def _pattern(loc: Loc) -> str:
    parts = [str(p) for p in loc]
    if parts[:2] == ["backup", "remotes"] and len(parts) == 5:
        parts[2] = parts[4] = "*"
    if parts[:2] == ["sso", "users"] and len(parts) == 4:
        parts[2] = "*"
    return ".".join(parts)


def content_problem(loc: Loc, raw: bytes) -> str | None:
    """Why this secret's bytes cannot be used at `loc`, or None. Never quotes the content."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"the secret file is not UTF-8 text (bad byte at offset {exc.start})"
    value = text.rstrip("\r\n")  # one trailing line break is how editors save a file
    if not value.strip():
        return "the secret file is empty"
    if "\n" in value or "\r" in value:
        return "the secret file holds more than one line (a secret is one line)"
    if any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in value):
        return "the secret file contains a control character"
    if value != value.strip():
        return "the secret starts or ends with a blank (it would be trimmed by some consumers)"
    if _pattern(loc) == HASH_KEY and not BCRYPT_HASH.fullmatch(value):
        return f"the secret file holds no bcrypt password hash: write it with `homelab sso passwd {loc[2]}`"
    forbidden, why = _FORBIDDEN.get(_pattern(loc), ("", ""))
    bad = sorted({c for c in value if c in forbidden})
    if bad:
        return f"the secret contains {' '.join(repr(c) for c in bad)}, which cannot be written there ({why})"
    return None


def _problem(loaded: LoadedConfig, loc: Loc, relative: str) -> str | None:
    path = loaded.secret_path(relative)
    try:
        raw = files.read_bytes(path, MAX_SECRET_BYTES)
        mode = stat.S_IMODE(path.stat().st_mode)
    except files.Unreadable as exc:
        if exc.kind == "missing":
            return "the secret file does not exist (the path is relative to homelab.yaml's folder)"
        if exc.kind == "too_large":
            return f"the secret file is larger than {MAX_SECRET_BYTES // 1024} KiB"
        if exc.kind == "special":
            return "the secret file is not a regular file"
        return f"the secret file cannot be read ({exc.reason})"
    except OSError as exc:  # replaced between the read and the mode check
        return f"the secret file cannot be read ({exc.strerror or type(exc).__name__})"
    if mode & 0o077:
        return f"the secret file is readable by others (mode {mode:04o}); make it private with chmod 600"
    return content_problem(loc, raw)


def secret_file_problems(loaded: LoadedConfig) -> Iterator[tuple[Loc, str]]:
    for loc, relative in secret_refs(loaded.config):
        problem = _problem(loaded, loc, relative)
        if problem:
            yield loc, problem
