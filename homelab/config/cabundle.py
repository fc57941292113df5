"""domain.acme.ca_bundle, checked at load (so `validate` catches it): a regular file of PEM certificates.
Both edges read it only when they first talk to the CA, where a bad file would fail late and vaguely
(lego: "could not load CA certificates"; certbot: an SSL error per attempt)."""

from __future__ import annotations

import stat
from collections.abc import Iterator

from homelab.config.loaded import LoadedConfig, Loc

MAX_BUNDLE_BYTES = 1024 * 1024
LOC: Loc = ("domain", "acme", "ca_bundle")


def ca_bundle_problems(loaded: LoadedConfig) -> Iterator[tuple[Loc, str]]:
    relative = loaded.config.domain.acme.ca_bundle
    if relative is None:
        return
    path = loaded.secret_path(relative)
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            yield LOC, f"{path} is not a regular file (the edge mounts it as one)"
            return
        if info.st_size > MAX_BUNDLE_BYTES:
            yield LOC, f"{path} is larger than {MAX_BUNDLE_BYTES // 1024} KiB: not a CA bundle"
            return
        raw = path.read_bytes()
    except FileNotFoundError:
        yield LOC, f"{path} does not exist (the path is relative to homelab.yaml's folder)"
        return
    except OSError as exc:
        yield LOC, f"{path} cannot be read ({exc.strerror or type(exc).__name__})"
        return
    from cryptography import x509  # only when a bundle is configured: it is slow to import

    try:
        x509.load_pem_x509_certificates(raw)
    except ValueError:
        yield LOC, f"{path} holds no PEM certificate (expected -----BEGIN CERTIFICATE----- blocks)"
