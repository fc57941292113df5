"""`homelab init`: a commented starter config (the bundled example) for a hardware profile."""

from __future__ import annotations

import os
from pathlib import Path

from homelab.errors import ConfigError, RefusedToOverwrite
from homelab.profiles import available


def starter_text() -> str:
    bundled = Path(__file__).parent / "_example.yaml"
    source = bundled if bundled.is_file() else Path(__file__).parent.parent / "examples" / "homelab.yaml"
    return source.read_text(encoding="utf-8")


def write_starter(path: Path, profile: str) -> None:
    if profile not in available():
        raise ConfigError([f"--profile: unknown hardware profile {profile!r} (known: {', '.join(available())})"])
    text = starter_text().replace("profile: ecc-mini-itx", f"profile: {profile}")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        raise RefusedToOverwrite(f"{path} already exists; not overwriting it") from None
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
