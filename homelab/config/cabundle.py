"""domain.acme.ca_bundle, checked at load (so `validate` catches it): a regular file of PEM certificates.
Both edges read it only when they first talk to the CA, where a bad file would fail late and vaguely
(lego: "could not load CA certificates"; certbot: an SSL error per attempt)."""

from __future__ import annotations

from collections.abc import Iterator

from homelab import files
from homelab.config.loaded import LoadedConfig, Loc

MAX_BUNDLE_BYTES = 1024 * 1024
LOC: Loc = ("domain", "acme", "ca_bundle")


def ca_bundle_problems(loaded: LoadedConfig) -> Iterator[tuple[Loc, str]]:
    relative = loaded.config.domain.acme.ca_bundle
    if relative is None:
        return
    path = loaded.secret_path(relative)
    try:
        raw = files.read_bytes(path, MAX_BUNDLE_BYTES)
    except files.Unreadable as exc:
        hint = " (the path is relative to homelab.yaml's folder)" if exc.kind == "missing" else ""
        yield LOC, f"{path}: {exc.reason}{hint}"
        return
    from cryptography import x509  # only when a bundle is configured: it is slow to import

    try:
        x509.load_pem_x509_certificates(raw)
    except ValueError:
        yield LOC, f"{path} holds no PEM certificate (expected -----BEGIN CERTIFICATE----- blocks)"
