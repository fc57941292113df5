"""`homelab certs check`: will the CA be able to issue for every served name? Each finding says what to
change. Run by `homelab doctor` too. DNS goes through one small resolver a test can point at a local
server; the network probes take their address and ports as parameters for the same reason."""

from __future__ import annotations

import base64
import contextlib
import email.utils
import errno
import json
import secrets
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import dns.exception
import dns.name
import dns.query
import dns.rcode
import dns.resolver
import dns.tsig
import dns.tsigkeyring
import dns.update

from homelab.certs import dns_update
from homelab.certs.dns_update import DNS_CHECK
from homelab.certs.policy import HTTPREQ_SECRETS, ca_server, httpreq_credentials, name_sets
from homelab.certs.store import ca_kind_of_url
from homelab.checks import Check
from homelab.config.dns01 import Httpreq
from homelab.layout import EDGE_STACK, secret_name
from homelab.plan_model import Plan

LETSENCRYPT_CAA = "letsencrypt.org"  # the issuer domain Let's Encrypt checks CAA records for
CHALLENGE_PORT = {"http": 80, "tls": 443}
PREFLIGHT_LABEL = "_homelab-preflight"  # the name the httpreq check presents a TXT record at
SKEW_WARN, SKEW_FAIL = 30, 300  # seconds


@dataclass(frozen=True)
class Probe:
    """Where the checks look: the DNS server (None: the system's), the box's public address, the public
    port each challenge needs, where to listen while testing a port, and the CA to ask for the time."""

    nameserver: str | None = None
    dns_port: int = 53
    address: str | None = None
    challenge_ports: tuple[tuple[str, int], ...] = tuple(CHALLENGE_PORT.items())
    listen_host: str = "0.0.0.0"  # noqa: S104 - the challenge arrives from outside
    clock_url: str | None = None
    timeout: float = 5.0

    def resolver(self) -> dns.resolver.Resolver:
        if self.nameserver is None:
            resolver = dns.resolver.Resolver()
        else:
            resolver = dns.resolver.Resolver(configure=False)
            resolver.nameservers = [self.nameserver]
            resolver.port = self.dns_port
        resolver.lifetime = self.timeout
        return resolver


def run(plan: Plan, probe: Probe) -> list[Check]:
    configured = plan.config.certs.public_address
    address = probe.address or (str(configured) if configured else None)
    resolver = probe.resolver()
    checks: list[Check] = []
    wildcard = plan.config.domain.wildcard
    for route in plan.routes:
        checks += _address(route.host, address, resolver)
        if not wildcard:
            checks += _caa(route.host, plan, resolver)
    if wildcard:  # the CA checks CAA for the certificate's names: the domain and *.domain
        for name in sorted(name_sets(plan)[0], key=len):
            checks += _caa(name, plan, resolver)
    checks += _challenge(plan, address, probe)
    checks += _clock(probe.clock_url or ca_server(plan), probe.timeout)
    return checks


def _lookup(resolver: dns.resolver.Resolver, name: str, rdtype: str) -> list[str] | None:
    """The records' texts; [] when the name has none of that type; None when the name does not exist."""
    try:
        return [r.to_text() for r in resolver.resolve(name, rdtype)]
    except dns.resolver.NXDOMAIN:
        return None
    except dns.resolver.NoAnswer:
        return []


def _address(host: str, expected: str | None, resolver: dns.resolver.Resolver) -> Iterator[Check]:
    name = f"{host} address"
    try:
        found = (_lookup(resolver, host, "A") or []) + (_lookup(resolver, host, "AAAA") or [])
    except dns.exception.DNSException as exc:
        yield Check("fail", name, f"DNS lookup failed ({exc}): check the resolver / your DNS provider")
        return
    target = expected or "this box's public address"
    if not found:
        yield Check("fail", name, f"no A/AAAA record: add `{host}. A {target}` at your DNS provider (or ddns)")
    elif expected is None:
        yield Check("warn", name, f"resolves to {', '.join(found)}; pass --address or set certs.public_address")
    elif expected not in found:
        yield Check(
            "fail",
            name,
            f"resolves to {', '.join(found)}, not this box's public address {expected}: "
            f"point the A record at {expected} (check ddclient)",
        )
    else:
        yield Check("ok", name, f"resolves to {expected}")


def relevant_caa(host: str, resolver: dns.resolver.Resolver) -> tuple[str, list[tuple[str, str]]]:
    """RFC 8659 section 3: the CAA set of the closest node, climbing from the name to the root, that has
    one. Returns that node and its (tag, issuer domain) pairs; ("", []) when no node has one."""
    node = dns.name.from_text(host.removeprefix("*."))  # a wildcard's search starts at its base name
    while node != dns.name.root:
        records = _lookup(resolver, node.to_text(), "CAA") or []
        if records:
            pairs = []
            for text in records:
                _flags, tag, value = text.split(" ", 2)
                pairs.append((tag.lower(), value.strip('"').split(";")[0].strip().lower()))
            return node.to_text(omit_final_dot=True), pairs
        node = node.parent()
    return "", []


def _caa(host: str, plan: Plan, resolver: dns.resolver.Resolver) -> Iterator[Check]:
    name = f"{host} CAA"
    if ca_kind_of_url(ca_server(plan)) not in ("production", "staging"):
        yield Check("ok", name, "test CA: CAA not checked")
        return
    try:
        node, pairs = relevant_caa(host, resolver)
    except dns.exception.DNSException as exc:
        yield Check("fail", name, f"CAA lookup failed ({exc}): Let's Encrypt refuses to issue when it fails too")
        return
    wildcard = host.startswith("*.")
    tag = "issuewild" if wildcard and any(t == "issuewild" for t, _ in pairs) else "issue"
    allowed = [domain for t, domain in pairs if t == tag]
    if not pairs or (not allowed and not any(t in ("issue", "issuewild") for t, _ in pairs)):
        yield Check("ok", name, "no CAA restriction: any CA may issue")
    elif LETSENCRYPT_CAA in allowed:
        yield Check("ok", name, f"CAA at {node} allows {LETSENCRYPT_CAA}")
    else:
        others = ", ".join(d or "no CA" for d in allowed) or "no CA"
        yield Check(
            "fail",
            name,
            f'CAA at {node} allows only {others} ({tag}): add `{node}. CAA 0 {tag} "{LETSENCRYPT_CAA}"`',
        )


def _challenge(plan: Plan, address: str | None, probe: Probe) -> Iterator[Check]:
    challenge = plan.config.domain.acme.challenge
    ports = dict(probe.challenge_ports)
    if challenge == "dns":
        yield from _dns_credentials(plan, probe.timeout)
        return
    port = ports[challenge]
    kind = {"http": "HTTP-01", "tls": "TLS-ALPN-01"}[challenge]
    if address is None:
        yield Check("warn", f"port {port}", f"{kind} needs port {port}: pass --address to test it")
        return
    answer = reachable(address, port, probe.listen_host, probe.timeout)
    if answer is None:
        yield Check("warn", f"port {port}", f"{kind}: cannot listen on port {port} to test it (run as root)")
    elif answer:
        yield Check("ok", f"port {port}", f"{kind}: {address}:{port} answers")
    else:
        yield Check(
            "fail",
            f"port {port}",
            f"{kind}: {address}:{port} does not answer: forward TCP {port} on your router to this box and "
            f"allow it in the firewall; if your ISP blocks it, use another challenge (domain.acme.challenge)",
        )


def _dns_credentials(plan: Plan, timeout: float) -> Iterator[Check]:
    httpreq = plan.config.domain.acme.httpreq
    if httpreq is None:
        yield from _dns_update(plan, timeout)
    else:
        yield _httpreq_round_trip(plan, httpreq, timeout)


def _dns_update(plan: Plan, timeout: float) -> Iterator[Check]:
    """DNS-01 needs no inbound port but working DNS credentials: do what the edge's ACME client will do
    (homelab/certs/dns_update.py)."""
    acme = plan.config.domain.acme
    if acme.rfc2136 is None:
        yield Check("ok", DNS_CHECK, f"dns-01 through {acme.dns_provider}: not checked (rfc2136 and httpreq only)")
        return
    yield from dns_update.check(plan, acme.rfc2136, timeout)


def _httpreq_round_trip(plan: Plan, httpreq: Httpreq, timeout: float) -> Check:
    """Present and clean up a test record the way lego's httpreq provider does (POST /present and
    /cleanup, {"fqdn", "value"}, Basic auth from the secret files); the endpoint's DNS is its business."""
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    credentials = httpreq_credentials(httpreq)
    if credentials:
        files = [plan.secrets[secret_name(EDGE_STACK, HTTPREQ_SECRETS[v])].source or "" for v in credentials]
        try:  # lego trims only the line end
            user, password = (Path(f).read_text(encoding="utf-8").rstrip("\r\n") for f in files)
        except OSError as exc:
            return Check("fail", DNS_CHECK, f"cannot read the httpreq credentials ({exc})")
        headers["Authorization"] = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    fqdn = f"_acme-challenge.{PREFLIGHT_LABEL}.{plan.config.domain.name}."
    body = json.dumps({"fqdn": fqdn, "value": secrets.token_urlsafe(32)}).encode()
    endpoint = httpreq.endpoint.rstrip("/")
    answers = []
    try:
        for path in ("/present", "/cleanup"):
            # an http(s) URL: the config allows no other scheme
            request = urllib.request.Request(endpoint + path, data=body, headers=headers, method="POST")  # noqa: S310
            with urllib.request.urlopen(request, timeout=timeout) as answer:  # noqa: S310
                answers.append(answer.status)
    except urllib.error.HTTPError as exc:
        fix = "check username_file and password_file" if exc.code in (401, 403) else "see the endpoint's log"
        verb = "present" if not answers else "clean up"
        return Check(
            "fail" if not answers else "warn", DNS_CHECK, f"{endpoint} refused to {verb} TXT {fqdn} ({exc.code}): {fix}"
        )
    except (urllib.error.URLError, OSError) as exc:
        return Check("fail", DNS_CHECK, f"cannot reach {endpoint} ({exc}): check httpreq.endpoint")
    return Check("ok", DNS_CHECK, f"{endpoint} presented and cleaned up TXT {fqdn}")


def reachable(address: str, port: int, listen_host: str, timeout: float) -> bool | None:
    """Connect to address:port. When nothing listens on the port here (the edge is not up yet), listen
    on it while connecting, so the answer tells whether the router and firewall let it through. None
    when this process may not listen there."""
    with contextlib.ExitStack() as stack:
        listener = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
        try:
            listener.bind((listen_host, port))
            listener.listen(1)
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                return None  # cannot listen there (no privilege to bind a low port): cannot tell
        try:
            socket.create_connection((address, port), timeout=timeout).close()
        except OSError:
            return False
    return True


def _clock(url: str, timeout: float) -> Iterator[Check]:
    """Compare this clock with the Date header of the CA's directory."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - the configured CA
            stamp = response.headers.get("Date")
    except (urllib.error.URLError, OSError, ValueError) as exc:
        yield Check("warn", "clock", f"cannot ask {url} for the time ({exc})")
        return
    if not stamp:
        yield Check("warn", "clock", f"{url} sent no Date header")
        return
    skew = (datetime.now(UTC) - email.utils.parsedate_to_datetime(stamp)).total_seconds()
    detail = f"{abs(skew):.0f} s {'ahead of' if skew > 0 else 'behind'} {url}"
    if abs(skew) < SKEW_WARN:
        yield Check("ok", "clock", detail)
    else:
        fix = "turn on time sync: `timedatectl set-ntp true` (systemd-timesyncd) or install chrony"
        yield Check("fail" if abs(skew) >= SKEW_FAIL else "warn", "clock", f"{detail}: {fix}")
