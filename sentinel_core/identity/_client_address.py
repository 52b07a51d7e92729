"""The client address of a request: the transport peer, or, behind trusted proxies, the
address they forwarded (SPEC §2 ``trusted_proxies``).

Forwarding headers are read only when the peer itself is a trusted proxy; anyone else
could write them. The chain is then walked from the right (the hop our own proxy added)
to the left, skipping trusted proxies, and the first address that is not one is the
client: everything to its left was written by the client and is never believed. When
every hop is a trusted proxy, the leftmost is the client (a proxy calling us itself).

A header that cannot be read falls back to the peer, never to a value the client chose,
and the request is then limited as the proxy's own address, never exempt (SPEC §4): a
client cannot reach an exempt proxy's exemption by garbling its header. What cannot be
read:

- ``X-Forwarded-For`` has no quoting, so its hops are independent; only the hops walked
  (right of the client) must parse, and garbage a client put further left is ignored.
- ``Forwarded`` (RFC 7239) has quoted strings, so a syntax error anywhere makes every
  split ambiguous: the whole header must parse. A hop ``for=unknown``, an obfuscated
  ``for=_hidden`` or an element without ``for`` on the walked part is unreadable too.
- When both headers are present they must name the same client, or neither is believed
  (a proxy that maintains one of them passes the other through from the client).

Headers sent on several lines are read in full (``getlist`` where the framework's
mapping has it, as Starlette's and Werkzeug's do; WSGI servers join the lines).

A ``Forwarded`` header costs microseconds whatever its 8 KiB hold: its quoted strings
are found by one regular-expression pass (each opens right after ``=``), what remains
is checked by one more, and only the walked elements are split and read.
"""

from __future__ import annotations

import ipaddress
import logging
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import NamedTuple

from sentinel_core.config._network import Network

logger = logging.getLogger("sentinel")

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

MAX_HEADER_LENGTH = 8192
"""Longer forwarding headers are unreadable: no proxy chain needs more."""

_TOKEN = r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
"""Characters no header value carries (a tab aside): a header with one is unreadable."""
_QUOTED = re.compile(r'="([^"\\]*(?:\\[\s\S]?[^"\\]*)*)("|\Z)')
"""A quoted-string value (RFC 9110 §5.6.4), only right after ``=``: a scan from the left
finds exactly the values of a well-formed header, and leaves a quote anywhere else. It
cannot fail once ``="`` matched (an unterminated one ends at the end of the header,
with no closing group), so a search never backtracks over a long value."""
MAX_QUOTED = 64
"""Quotes and backslashes a ``Forwarded`` header may carry: 32 quoted values (eight
proxies' worth of parameters), and no proxy writes quoted-pairs."""
_VALUE = "\x00"
"""What each quoted value becomes in the skeleton (a control byte: never in a header)."""
_PAIR = re.compile(rf"[ \t]*({_TOKEN})=({_TOKEN}|{_VALUE})[ \t]*")
_ELEMENTS = re.compile(r",[ \t,;]*")
"""Element separators with the empty elements and empty pairs that follow them
(RFC 9110 §5.6.1, RFC 7239 §4). It starts with a literal, so a search skips along
at C speed, and never backtracks over a run of blanks."""
MAX_PAIRS = 16
"""Parameters one walked ``Forwarded`` element may carry (RFC 7239 defines four)."""
MAX_HOPS = 32
"""Trusted proxies one walk crosses at most; a longer chain is unreadable."""
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


class Client(NamedTuple):
    """A request's client address, and whether it is a trusted proxy's own address
    because that proxy's forwarding header could not be read."""

    address: str | None
    unreadable: bool = False
    """A trusted proxy forwarded a header that could not be read: ``address`` is the
    proxy's, the request is limited as that address and is never exempt."""


class ClientAddresses:
    """Resolves client addresses for one ``trusted_proxies`` list (empty: the peer).

    A list that trusts every address (``0.0.0.0/0``, ``::/0``) is logged as a warning
    when built: every client can then write the address it is limited as.
    """

    def __init__(self, trusted_proxies: Sequence[Network]) -> None:
        self._trusted = tuple(trusted_proxies)
        self._verdicts: dict[str, tuple[str | None, bool]] = {}
        for network in self._trusted:
            if network.prefixlen == 0:
                logger.warning(
                    "trusted_proxies contains %s, which trusts every address: any client "
                    "can write the Forwarded or X-Forwarded-For address it is limited as "
                    "(and an exempt one); list only your own proxies' networks",
                    network,
                )

    def resolve(self, peer: str | None, headers: Mapping[str, str]) -> Client:
        """The client of a request from ``peer`` with ``headers``."""
        if not self._trusted or peer is None or not self._judge(peer)[1]:
            return Client(peer)
        forwarded = _header(headers, "forwarded")
        forwarded_for = _header(headers, "x-forwarded-for")
        if forwarded is None and forwarded_for is None:
            return Client(peer)
        client = None
        if forwarded is not None:
            client = self._walk(_forwarded_nodes(forwarded))
            if client is None:
                return Client(peer, unreadable=True)
        if forwarded_for is not None:
            too_long = len(forwarded_for) > MAX_HEADER_LENGTH
            hops = None if too_long else reversed(forwarded_for.split(","))
            from_forwarded_for = self._walk(hops)
            if from_forwarded_for is None or client not in (None, from_forwarded_for):
                return Client(peer, unreadable=True)
            client = from_forwarded_for
        return Client(client)

    def _walk(self, hops_right_to_left: Iterable[str | None] | None) -> str | None:
        """The rightmost hop that is not a trusted proxy, the leftmost when all are, as
        a normalised address; None when a hop on the way is unreadable, or after
        `MAX_HOPS` trusted ones."""
        if hops_right_to_left is None:
            return None
        address = None
        for crossed, hop in enumerate(hops_right_to_left):
            if hop is None or crossed > MAX_HOPS:
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


def _forwarded_nodes(value: str) -> Iterator[str | None] | None:
    """The ``for=`` value of each element of a ``Forwarded`` header, right to left
    (None for an element without one, or one that does not parse), read lazily; None
    when the header's quoting does not parse, which makes every split ambiguous."""
    if len(value) > MAX_HEADER_LENGTH or _CONTROL.search(value):
        return None
    quoted: list[str] = []
    if '"' in value:
        if value.count('"') + value.count("\\") > MAX_QUOTED:
            return None
        found = _QUOTED.findall(value)
        if any(not closed for _, closed in found):
            return None  # a value whose quote never closes
        quoted = [_QUOTED_PAIR.sub(r"\1", text) for text, _ in found]
        value = _QUOTED.sub("=" + _VALUE, value)
        if '"' in value:
            return None  # a quote that opens no value
    return _elements_right_to_left(value, quoted)


def _elements_right_to_left(skeleton: str, quoted: list[str]) -> Iterator[str | None]:
    remaining = len(quoted)  # the quoted values of the elements not read yet
    for element in reversed(_ELEMENTS.split(skeleton)):
        found, remaining = _element(element, quoted, remaining)
        if found is None:
            yield None  # unreadable: the walk stops here
        elif found:  # an element with no pair is an empty list element: skipped
            yield found.get("for")


def _element(element: str, quoted: list[str], remaining: int) -> tuple[dict[str, str] | None, int]:
    """An element's parameters by lower-case name, or None when it does not parse;
    and how many quoted values remain left of it."""
    pairs = element.split(";")
    if len(pairs) > MAX_PAIRS:
        return None, remaining
    found: dict[str, str] = {}
    for pair in reversed(pairs):
        if not pair.strip(" \t"):
            continue  # an empty pair (RFC 7239 §4)
        match = _PAIR.fullmatch(pair)
        if match is None:
            return None, remaining
        name, raw = match.group(1).lower(), match.group(2)
        if raw == _VALUE:
            remaining -= 1
            raw = quoted[remaining]
        if name in found:  # RFC 7239 §4: a parameter at most once per element
            return None, remaining
        found[name] = raw
    return found, remaining
