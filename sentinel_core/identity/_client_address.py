"""The client address of a request: the transport peer, or, behind trusted proxies, the
address they forwarded (SPEC §2 ``trusted_proxies``).

Forwarding headers are read only when the peer itself is a trusted proxy; anyone else
could write them. The chain is then walked from the right (the hop our own proxy added)
to the left, skipping trusted proxies, and the first address that is not one is the
client: everything to its left was written by the client and is never believed. When
every hop is a trusted proxy, the leftmost is the client (a proxy calling us itself).

A header that cannot be read falls back to the peer, never to a value the client chose:

- ``X-Forwarded-For`` has no quoting, so its hops are independent; only the hops walked
  (right of the client) must parse, and garbage a client put further left is ignored.
- ``Forwarded`` (RFC 7239) has quoted strings, so a syntax error anywhere makes every
  split ambiguous: the whole header must parse. A hop ``for=unknown``, an obfuscated
  ``for=_hidden`` or an element without ``for`` on the walked part is unreadable too.
- When both headers are present they must name the same client, or neither is believed
  (a proxy that maintains one of them passes the other through from the client).

Headers sent on several lines are read in full (``getlist`` where the framework's
mapping has it, as Starlette's and Werkzeug's do; WSGI servers join the lines).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping, Sequence

from sentinel_core.config._network import Network

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

MAX_HEADER_LENGTH = 8192
"""Longer forwarding headers are unreadable: no proxy chain needs more."""

_TOKEN = r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
_QUOTED = r'"(?:[^"\\\x00-\x08\x0a-\x1f\x7f]|\\[\t\x20-\x7e\x80-\xff])*"'
_PAIR = re.compile(rf"[ \t]*({_TOKEN})=({_TOKEN}|{_QUOTED})[ \t]*")
_SEPARATOR = re.compile(r"[ \t]*([,;]|\Z)")
_QUOTED_PAIR = re.compile(r"\\(.)")
_BRACKETED = re.compile(r"\[([0-9A-Fa-f:.]+)\](?::[0-9]{1,5})?")
_IPV4_PORT = re.compile(r"([0-9.]+):[0-9]{1,5}")


_RECENT = 4096
"""Hops remembered parsed and judged (parsing one costs microseconds)."""


def parse_address(text: str | None) -> IPAddress | None:
    """An address as a transport reports it (``[v6]``, a zone id, IPv4-mapped IPv6
    allowed), normalised to the address proper; None for anything else."""
    if not text or len(text) > 64:
        return None
    text = text.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    try:
        address = ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def in_networks(address: IPAddress, networks: Sequence[Network]) -> bool:
    return any(address in network for network in networks)


class ClientAddresses:
    """Resolves client addresses for one ``trusted_proxies`` list (empty: the peer)."""

    def __init__(self, trusted_proxies: Sequence[Network]) -> None:
        self._trusted = tuple(trusted_proxies)
        self._verdicts: dict[str, tuple[str | None, bool]] = {}

    def resolve(self, peer: str | None, headers: Mapping[str, str]) -> str | None:
        """The client address of a request from ``peer`` with ``headers``."""
        if not self._trusted or peer is None or not self._judge(peer)[1]:
            return peer
        forwarded = _header(headers, "forwarded")
        forwarded_for = _header(headers, "x-forwarded-for")
        if forwarded is None and forwarded_for is None:
            return peer
        client = None
        if forwarded is not None:
            client = self._walk(_forwarded_nodes(forwarded))
            if client is None:
                return peer
        if forwarded_for is not None:
            too_long = len(forwarded_for) > MAX_HEADER_LENGTH
            hops = None if too_long else reversed(forwarded_for.split(","))
            from_forwarded_for = self._walk(hops)
            if from_forwarded_for is None or client not in (None, from_forwarded_for):
                return peer
            client = from_forwarded_for
        return client

    def _walk(self, hops_right_to_left: Iterable[str | None] | None) -> str | None:
        """The rightmost hop that is not a trusted proxy, the leftmost when all are, as
        a normalised address; None when a hop on the way is unreadable."""
        if hops_right_to_left is None:
            return None
        address = None
        for hop in hops_right_to_left:
            if hop is None:
                return None
            address, trusted = self._judge(hop)
            if address is None or not trusted:
                return address
        return address

    def _judge(self, hop: str) -> tuple[str | None, bool]:
        """A hop's normalised address (None: unreadable) and whether it is a trusted
        proxy; remembered by text (the proxies' own addresses come with every request)."""
        verdict = self._verdicts.get(hop)
        if verdict is None:
            if len(self._verdicts) >= _RECENT:
                self._verdicts.clear()  # bounded; a lost race only judges twice
            address = _node(hop)
            if address is None:
                verdict = (None, False)
            else:
                verdict = (str(address), in_networks(address, self._trusted))
            self._verdicts[hop] = verdict
        return verdict


def _header(headers: Mapping[str, str], name: str) -> str | None:
    """Every line of header ``name`` joined with commas, or None when it is absent."""
    getlist = getattr(headers, "getlist", None)
    if callable(getlist):
        lines = [str(line) for line in getlist(name)]
        return ",".join(lines) if lines else None
    return headers.get(name)


def _node(text: str) -> IPAddress | None:
    """A hop's address: ``1.2.3.4``, ``1.2.3.4:80``, ``2001:db8::1``, ``[2001:db8::1]``
    or ``[2001:db8::1]:80``; None for ``unknown``, obfuscated names and anything else."""
    text = text.strip(" \t")
    match = _BRACKETED.fullmatch(text) or _IPV4_PORT.fullmatch(text)
    if match is not None:
        text = match.group(1)
    elif not text or text.startswith("["):
        return None
    return parse_address(text)


def _forwarded_nodes(value: str) -> list[str | None] | None:
    """The ``for=`` value of each element of a ``Forwarded`` header, right to left
    (None for an element without one); None when the header does not parse."""
    if len(value) > MAX_HEADER_LENGTH:
        return None
    nodes: list[str | None] = []
    element: dict[str, str] = {}
    position = 0
    while True:
        pair = _PAIR.match(value, position)
        if pair is not None:
            name, raw = pair.group(1).lower(), pair.group(2)
            if name in element:  # RFC 7239 §4: a parameter at most once per element
                return None
            element[name] = _QUOTED_PAIR.sub(r"\1", raw[1:-1]) if raw[0] == '"' else raw
            position = pair.end()
        separator = _SEPARATOR.match(value, position)
        if separator is None:
            return None
        position = separator.end()
        if separator.group(1) != ";":
            if element:  # empty list elements are allowed and skipped (RFC 9110 §5.6.1)
                nodes.append(element.get("for"))
            element = {}
        if not separator.group(1):
            break
    nodes.reverse()
    return nodes if nodes else None
