"""Names the backup cannot keep exactly, found before anything is uploaded (the run fails naming each one):

- Unicode twins: two names in one folder that differ only in normalisation (NFC "é" vs NFD "e" + U+0301).
  rclone treats them as one object ("Duplicate object found in source - ignoring") and keeps one of them.
- names too long for the crypt: a name of 144 bytes or more encrypts (padded to 16 bytes, base32) to more
  than 255 characters, which most remotes (every filesystem behind local, sftp, webdav) refuse.
- names that are not UTF-8: rclone rewrites the invalid bytes.
- names holding U+201B (rclone's quoting character): rclone 1.75 cannot open such a file ("no such file").
"""

from __future__ import annotations

import unicodedata
from collections import defaultdict

from homelab.backup.tree import Entry
from homelab.runtime.rclone import encode_name

MAX_NAME_BYTES = 143  # 144 bytes pad to 160, which base32-encodes to 256 characters
QUOTE = "\u201b"


def _shown(path: str) -> str:
    return path if path.isprintable() else ascii(path)


def problems(entries: list[Entry]) -> list[str]:
    found: list[str] = []
    twins: dict[tuple[str, str], list[str]] = defaultdict(list)
    for e in entries:
        if not e.path:
            continue
        folder, _, name = e.path.rpartition("/")
        try:
            raw = encode_name(name).encode("utf-8")  # the crypt encrypts rclone's spelling of the name
        except UnicodeEncodeError:
            found.append(f"not UTF-8: {_shown(e.path)}")
            continue
        if QUOTE in name:
            found.append(f"rclone cannot read a name holding U+201B: {_shown(e.path)}")
        if len(raw) > MAX_NAME_BYTES:
            found.append(f"name too long for the crypt ({len(raw)} bytes, at most {MAX_NAME_BYTES}): {_shown(e.path)}")
        twins[(folder, unicodedata.normalize("NFC", name))].append(e.path)
    for paths in twins.values():
        if len(paths) > 1:
            found.append("names differing only in Unicode normalisation: " + ", ".join(_shown(p) for p in paths))
    return found
