"""The rules every homelab.yaml follows, in words: the top of the config reference (docs/config-reference.md),
built from the limits the loader enforces so the two cannot disagree."""

from __future__ import annotations

from homelab.config.secretfiles import MAX_SECRET_BYTES
from homelab.config.yamlsafe import MAX_BYTES, MAX_DEPTH, MAX_VALUES

RULES = f"""Every key homelab.yaml accepts. Unknown keys are errors (with a did-you-mean), in every map too:
`storage.datasets` keys, `images` keys and `backup.datasets` items must name a dataset role or service the
catalog has. Every problem is reported as `file:line: key.path: message`, with exit code 2.

- The file is at most {MAX_BYTES // 1024} KiB and {MAX_VALUES} values (aliases count as what they expand to), \
nested at most {MAX_DEPTH} deep; an alias to a value that contains it is refused.
- No control characters (line breaks, tabs, escapes) in any key or value: every value ends up in a config
  file or on a command line. Names that land unquoted in one are checked for their form.
- Paths are absolute and written without `..`; they are normalised (`/tank//apps/` -> `/tank/apps`).
  Networks are written as networks (`192.168.1.0/24`, not `192.168.1.5/24`).
- Secret files (`*_file`, `dns_credentials`, `secret_options`) are paths relative to homelab.yaml, mode
  0600, one line of UTF-8 (a trailing line break is fine), not empty, no leading or trailing blank, at
  most {MAX_SECRET_BYTES // 1024} KiB; the ddns password has no `'` or `\\`, \
rclone options no `"` or `` ` ``. Neither their content nor the path written is ever printed."""
