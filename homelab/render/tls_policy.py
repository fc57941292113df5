"""Mozilla's *intermediate* TLS profile (guideline 5.7), in each edge's spelling. One list, two renderings."""

from __future__ import annotations

# (OpenSSL name, Go/Traefik name); TLS 1.3 suites are fixed by both servers and need no listing.
CIPHERS = (
    ("ECDHE-ECDSA-AES128-GCM-SHA256", "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"),
    ("ECDHE-RSA-AES128-GCM-SHA256", "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"),
    ("ECDHE-ECDSA-AES256-GCM-SHA384", "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"),
    ("ECDHE-RSA-AES256-GCM-SHA384", "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384"),
    ("ECDHE-ECDSA-CHACHA20-POLY1305", "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305"),
    ("ECDHE-RSA-CHACHA20-POLY1305", "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305"),
)
# (OpenSSL name, Go/Traefik name)
CURVES = (("X25519", "X25519"), ("prime256v1", "CurveP256"), ("secp384r1", "CurveP384"))


def openssl_ciphers() -> str:
    return ":".join(openssl for openssl, _ in CIPHERS)


def openssl_curves() -> str:
    return ":".join(openssl for openssl, _ in CURVES)


def go_ciphers() -> list[str]:
    return [go for _, go in CIPHERS]


def go_curves() -> list[str]:
    return [go for _, go in CURVES]
