"""The RFC 2136 part of `homelab certs check`: for each TXT name the edge will write (`_acme-challenge.<name>`,
one for a wildcard and its domain), find the zone the way lego and certbot do (SOA queries at the server,
climbing from the name), add a TXT record there with the configured key, read it back from the server and
delete it. So a key that only the `_acme-challenge` names may use passes, a policy that refuses one name
fails naming it, and a domain below its zone's apex is updated in the zone that holds it."""

from __future__ import annotations

import binascii
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import dns.exception
import dns.message
import dns.name
import dns.query
import dns.rcode
import dns.rdatatype
import dns.tsig
import dns.tsigkeyring
import dns.update

from homelab.certs.policy import TSIG_SECRET, name_sets
from homelab.checks import Check
from homelab.config.dns01 import Rfc2136
from homelab.layout import EDGE_STACK, secret_name
from homelab.plan_model import Plan

DNS_CHECK = "DNS credentials"
CHALLENGE_LABEL = "_acme-challenge"
# A server that does not answer is reported within this many seconds, however many names there are.
DOWN_BUDGET = 2.5


def challenge_names(plan: Plan) -> list[str]:
    """The TXT names the edge writes: one per certificate name, a wildcard's at its base name."""
    names = {n.removeprefix("*.") for names in name_sets(plan) for n in names}
    return sorted(f"{CHALLENGE_LABEL}.{n}" for n in names)


def policy_line(key: str, name: str) -> str:
    """The least-privilege BIND `update-policy` rule for one challenge name (never zonesub: it would open
    every TXT record of the zone to the key)."""
    return f"grant {key} name {name}. TXT;"


class Refused(Exception):
    """An answer that ends one name's round trip; the message says what to change."""


@dataclass(frozen=True)
class Server:
    rfc2136: Rfc2136
    keyring: dict[dns.name.Name, dns.tsig.Key]
    secret_file: str
    timeout: float

    def __str__(self) -> str:
        return f"{self.rfc2136.server}:{self.rfc2136.port}"

    def ask(self, message: dns.message.Message, timeout: float | None = None) -> dns.message.Message:
        # TCP: a closed port answers at once (UDP would wait out the timeout), and updates are small anyway
        return dns.query.tcp(message, self.rfc2136.server, timeout=timeout or self.timeout, port=self.rfc2136.port)

    def update(self, zone: dns.name.Name, name: str, token: str | None, *, add: bool = False) -> str:
        """Add TXT `token` at `name`, or delete it (every TXT record there when `token` is None)."""
        algorithm = dns.name.from_text(self.rfc2136.tsig_algorithm)
        message = dns.update.UpdateMessage(zone, keyring=self.keyring, keyalgorithm=algorithm)
        if add:
            message.add(f"{name}.", 60, "TXT", token)
        elif token is None:
            message.delete(f"{name}.", "TXT")
        else:  # only this value: a real challenge the edge is answering right now stays
            message.delete(f"{name}.", "TXT", token)
        return dns.rcode.to_text(self.ask(message).rcode())

    def txt(self, name: str) -> list[str]:
        answer = self.ask(dns.message.make_query(name, "TXT"))
        return [r.to_text() for rrset in answer.answer if rrset.rdtype == dns.rdatatype.TXT for r in rrset]


def connect(plan: Plan, rfc2136: Rfc2136, timeout: float) -> Server | Check:
    """The configured RFC 2136 server, once it answered a query within DOWN_BUDGET s; else the finding."""
    secret_file = plan.secrets[secret_name(EDGE_STACK, TSIG_SECRET)].source or ""
    keyring = _tsig_keyring(rfc2136.tsig_key, secret_file)
    if isinstance(keyring, Check):
        return keyring
    server = Server(rfc2136, keyring, secret_file, timeout)
    started = time.monotonic()
    try:
        server.ask(dns.message.make_query(plan.config.domain.name, "SOA"), timeout=min(timeout, DOWN_BUDGET))
    except (dns.exception.DNSException, OSError) as exc:
        took = time.monotonic() - started
        return Check(
            "fail",
            DNS_CHECK,
            f"{server} does not answer ({reason(exc)}, {took:.1f} s): is the DNS server running, and are "
            "domain.acme.rfc2136.server and port its address?",
        )
    return server


def check(plan: Plan, rfc2136: Rfc2136, timeout: float) -> Iterator[Check]:
    server = connect(plan, rfc2136, timeout)
    if isinstance(server, Check):
        yield server
        return
    follows_cname = plan.config.edge.kind == "traefik"  # lego does; certbot's rfc2136 plugin does not
    for name in challenge_names(plan):
        yield _round_trip(server, name, follows_cname=follows_cname)


def _round_trip(server: Server, challenge: str, *, follows_cname: bool) -> Check:
    rfc2136 = server.rfc2136
    token = f'"{secrets.token_hex(8)}"'
    name = challenge
    try:
        target = cname_target(server, challenge)
        if target and not follows_cname:
            raise Refused(
                f"{challenge} is a CNAME to {target}: certbot (the NGINX edge) writes the TXT record at "
                f"{challenge} itself, where a CNAME leaves no room for it; remove the CNAME"
            )
        name = target or challenge  # lego writes where the CNAME points (a delegated challenge)
        zone = find_zone(server, name)
        added = server.update(zone, name, token, add=True)
        if added != "NOERROR":
            raise Refused(_refusal(server, name, zone, added))
        found = server.txt(name)
        deleted = server.update(zone, name, token, add=False)
    except Refused as exc:
        return Check("fail", challenge, str(exc))
    except dns.tsig.PeerBadTime:
        return Check(
            "fail",
            challenge,
            f"{server} rejected the signature's time (BADTIME): this box's clock or the server's is off; "
            "turn on time sync (`timedatectl set-ntp true` or chrony)",
        )
    except dns.tsig.PeerBadKey:
        return Check(
            "fail",
            challenge,
            f"{server} knows no key {rfc2136.tsig_key!r} with algorithm {rfc2136.tsig_algorithm} "
            "(BADKEY): "
            "domain.acme.rfc2136.tsig_key and tsig_algorithm must match the server's `key` statement",
        )
    except dns.tsig.PeerBadSignature:
        return Check(
            "fail",
            challenge,
            f"{server} does not verify the signature of key {rfc2136.tsig_key!r} (BADSIG): the secret "
            f"in {server.secret_file} is not the server's secret for it",
        )
    except (dns.exception.DNSException, OSError) as exc:
        return Check("fail", challenge, f"no answer from {server} ({reason(exc)}): is the server overloaded?")
    if token not in found:
        return Check("fail", challenge, f"{server} accepted TXT {name} but does not answer it: is it the primary?")
    if deleted != "NOERROR":
        return Check("warn", challenge, f"TXT added and read back at {server}, but deleting it answered {deleted}")
    where = f"zone {zone.to_text(omit_final_dot=True)} at {server}"
    at = f" at {name} (its CNAME's target)" if name != challenge else ""
    return Check("ok", challenge, f"TXT added{at}, read back and deleted in {where} with key {rfc2136.tsig_key}")


def cname_target(server: Server, name: str) -> str | None:
    """Where a CNAME chain from `name` ends (as lego follows it, at most 8 links), None without one."""
    node, target = dns.name.from_text(name), None
    for _ in range(8):
        answer = server.ask(dns.message.make_query(node, "CNAME"))
        links = [
            r for rrset in answer.answer if rrset.rdtype == dns.rdatatype.CNAME and rrset.name == node for r in rrset
        ]
        if not links:
            break
        node = links[0].target
        target = node.to_text(omit_final_dot=True)
    return target


def find_zone(server: Server, name: str) -> dns.name.Name:
    """The zone holding `name` as lego's FindZoneByFqdn finds it: ask SOA of the name, then of each parent,
    until an answer holds a SOA record; NXDOMAIN and empty answers climb, any other answer stops."""
    node = dns.name.from_text(name)
    while node != dns.name.root:
        answer = server.ask(dns.message.make_query(node, "SOA"))
        rcode = dns.rcode.to_text(answer.rcode())
        if rcode not in ("NOERROR", "NXDOMAIN"):
            raise Refused(
                f"{server} answered {rcode} for SOA {node.to_text(omit_final_dot=True)}: it serves no zone holding "
                f"{name}; point domain.acme.rfc2136.server at the primary of the zone holding it"
            )
        if any(rrset.rdtype == dns.rdatatype.SOA and rrset.name == node for rrset in answer.answer):
            return node
        node = node.parent()
    raise Refused(f"{server} serves no zone holding {name}: point domain.acme.rfc2136.server at that zone's primary")


def _refusal(server: Server, name: str, zone: dns.name.Name, rcode: str) -> str:
    key = server.rfc2136.tsig_key
    where = f"{server} answered {rcode} to adding TXT {name} in zone {zone.to_text(omit_final_dot=True)}"
    if rcode == "REFUSED":
        return (
            f"{where}: key {key} may not update this name; allow exactly it in the zone's update-policy: "
            f"`{policy_line(key, name)}`"
        )
    if rcode in ("NOTAUTH", "NOTZONE"):
        return f"{where}: it is not the zone's primary; point domain.acme.rfc2136.server at the primary"
    return f"{where}: see the DNS server's log"


def reason(exc: BaseException) -> str:
    if isinstance(exc, dns.exception.Timeout):
        return "timed out"
    return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__


def _tsig_keyring(key: str, secret_file: str) -> dict[dns.name.Name, dns.tsig.Key] | Check:
    try:
        secret = Path(secret_file).read_text(encoding="utf-8").strip()
        return dns.tsigkeyring.from_text({key: secret})
    except OSError as exc:
        return Check("fail", DNS_CHECK, f"{secret_file}: cannot read the TSIG secret ({exc.strerror})")
    except (ValueError, binascii.Error):
        return Check("fail", DNS_CHECK, f"{secret_file}: the TSIG secret is not base64 (copy it from the server's key)")
