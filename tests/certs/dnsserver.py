"""A tiny authoritative DNS server on 127.0.0.1 for the fast tests (UDP, built with dnspython's message
classes): records as zone-file text, NXDOMAIN for names it has nothing for."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import dns.message
import dns.rcode
import dns.rrset


@contextmanager
def serve(records: dict[tuple[str, str], list[str]]) -> Iterator[int]:
    """records: (name, type) -> rdata texts, e.g. ("example.com", "CAA"): ['0 issue "letsencrypt.org"'].
    Yields the UDP port."""
    names = {name.rstrip(".").lower() for name, _ in records}
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(0.1)  # closing a socket does not wake a thread blocked in recvfrom: poll the stop flag
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            try:
                data, peer = sock.recvfrom(4096)
            except TimeoutError:
                continue
            except OSError:
                return
            query = dns.message.from_wire(data)
            response = dns.message.make_response(query)
            question = query.question[0]
            qname = question.name.to_text(omit_final_dot=True).lower()
            qtype = dns.rdatatype.to_text(question.rdtype)
            texts = records.get((qname, qtype), [])
            if texts:
                response.answer.append(dns.rrset.from_text_list(question.name, 60, "IN", qtype, texts))
            elif qname not in names:
                response.set_rcode(dns.rcode.NXDOMAIN)
            sock.sendto(response.to_wire(), peer)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield sock.getsockname()[1]
    finally:
        stop.set()
        thread.join(timeout=10)
        sock.close()
