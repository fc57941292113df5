"""Names a backup must keep exactly, made in a dataset (shared by the fast and the real round trips)."""

from __future__ import annotations

import hashlib
import os
import unicodedata
from pathlib import Path

COMPOSED, DECOMPOSED = unicodedata.normalize("NFC", "café.txt"), unicodedata.normalize("NFD", "café.txt")
LONGEST = "L" * 251 + ".txt"  # 255 bytes: the most a name can hold
LONG_UNICODE = "é" * 127  # 254 bytes in 127 characters
NOT_UTF8 = os.fsdecode(b"not-utf8-\xff.txt")
LOOKALIKE = "not-utf8-\ufffd.txt"  # what rclone reads NOT_UTF8 as
NEWLINE = "new\nline.txt"
QUOTED = "odd\u201bquote"
FITS = "n" * 143  # the longest name whose encrypted form fits in 255 characters
TOO_LONG = "o" * 144


def deep_path(root: Path, total: int) -> str:
    """A path of about `total` bytes below root: 100-byte folders, then a 255-byte name."""
    parts = []
    while sum(len(p) + 1 for p in parts) + 255 < total - 101:
        parts.append(f"{len(parts):03d}" + "d" * 97)
    return "/".join([*parts, "D" * 251 + ".bin"])


def make(root: Path, *, deep_total: int) -> dict[str, str]:
    """The hostile names under root; their contents (each different), by path."""
    files = {
        COMPOSED: "composed twin",
        DECOMPOSED: "decomposed twin, different content",
        LONGEST: "a 255-byte name",
        LONG_UNICODE: "a 254-byte name in 127 characters",
        NOT_UTF8: "a name that is not UTF-8",
        LOOKALIKE: "the name rclone would read the other one as",
        NEWLINE: "a newline in the name",
        QUOTED: "rclone's quoting character",
        FITS: "143 bytes: stored under its own name",
        TOO_LONG: "144 bytes: stored under a derived name",
        "twin-dir-" + COMPOSED + "/inside": "in a composed folder",
        "twin-dir-" + DECOMPOSED + "/inside": "in a decomposed folder",
        ("F" * 200) + "/short.txt": "a short name in a folder whose name is too long",
        deep_path(root, deep_total): "a 255-byte name at the end of a long path",
    }
    # a real path where derived objects are kept, named like the derived name of another file
    files[".homelab-names/" + hashlib.sha256(os.fsencode(LONGEST)).hexdigest()] = "not the 255-byte name"
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
    os.symlink(LONGEST, root / ("S" * 250 + ".link"))  # a symlink with a long name: kept in the listing
    os.link(root / LONGEST, root / ("H" * 250 + ".hard"))  # a second name of the 255-byte file
    (root / ("E" * 255)).mkdir()  # an empty folder with a long name
    return files
