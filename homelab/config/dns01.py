"""The config of the DNS-01 providers homelab sets up itself (part of homelab/config/models.py, split out
for size): RFC 2136 (both edges), lego's httpreq and exec (Traefik)."""

from __future__ import annotations

import ipaddress
from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from homelab.config.base import Model
from homelab.config.types import Address, Hostname, Port, SecretFile, Url


class Rfc2136(Model):
    """A DNS server taking RFC 2136 dynamic updates signed with a TSIG key (BIND, Knot, PowerDNS...)."""

    server: Address = Field(description="The authoritative server taking the updates (IP or host name).")
    port: Port = Field(53, description="Its DNS port.")
    tsig_key: Hostname = Field(description="The TSIG key's name, as in the server's `key` statement.")
    tsig_algorithm: Literal["hmac-sha256", "hmac-sha384", "hmac-sha512"] = Field(
        "hmac-sha256", description="The TSIG key's algorithm."
    )
    tsig_secret_file: SecretFile = Field(description="File (0600) holding the key's base64 secret.")
    propagation_seconds: int = Field(
        0,
        ge=0,
        le=600,
        description="Seconds to wait after the update before the CA may look. 0 when this server is the zone's "
        "only public nameserver: Traefik then polls it for the record, certbot asks the CA at once. Raise it "
        "when secondaries must catch up first (NOTIFY and a zone transfer, usually a few seconds).",
    )


# http:// is fine only where the Basic-auth password cannot cross the internet: a LAN address or name
PRIVATE_SUFFIXES = (".home.arpa", ".internal", ".lan", ".local")


class Httpreq(Model):
    """An HTTP endpoint that sets the challenge's TXT records (lego's httpreq provider: POST /present and
    /cleanup with {"fqdn", "value"}), e.g. a small service in front of a DNS host's API."""

    endpoint: Url = Field(
        description="The endpoint's base URL; https, or http only for a LAN endpoint (a private IP address, "
        "a single-label name such as a compose service, or a name under .home.arpa/.internal/.lan/.local)."
    )
    username_file: SecretFile | None = Field(None, description="File (0600) holding the Basic-auth user name.")
    password_file: SecretFile | None = Field(None, description="File (0600) holding the Basic-auth password.")

    @field_validator("endpoint")
    @classmethod
    def _private_when_plain(cls, endpoint: str) -> str:
        if endpoint.startswith("http://") and not _on_lan(urlsplit(endpoint).hostname or ""):
            raise ValueError(
                f"{endpoint!r} sends the challenge and its password in the clear over the internet: use https "
                "(http only for a private address or LAN name)"
            )
        return endpoint

    @model_validator(mode="after")
    def _both_or_neither(self) -> Httpreq:
        # lego sends Basic auth only when both are set: one alone would silently send none
        if (self.username_file is None) != (self.password_file is None):
            raise ValueError("username_file and password_file go together (lego sends Basic auth only with both)")
        return self


def _on_lan(host: str) -> bool:
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return "." not in host or host.endswith(PRIVATE_SUFFIXES)
    return address.is_private


class Exec(Model):
    """A program the Traefik container runs to set the challenge's TXT records (lego's exec provider:
    `<program> present|cleanup <fqdn> <value>`, exit 0 for success; its output goes to Traefik's log)."""

    program: str = Field(
        min_length=1,
        description="The program, relative to homelab.yaml, mounted read-only into the Traefik container "
        "(Alpine: a #!/bin/sh script with busybox tools); its credentials come from dns_credentials (VAR_FILE).",
    )

    @field_validator("program")
    @classmethod
    def _beside_the_config(cls, program: str) -> str:
        if program.startswith("/"):
            raise ValueError(f"{program!r} must be relative to homelab.yaml (it is mounted into the Traefik container)")
        return program
