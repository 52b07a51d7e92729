"""The client address behind trusted proxies (SPEC §2 ``trusted_proxies``), as a table:
who may forward, which hop is the client, and what unreadable headers fall back to.

The adapters' suites (tests/{fastapi,flask,django}/test_*_exempt_proxies.py) show the
same rules end to end on a real Redis; here every parsing branch is pinned.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator, Mapping

import pytest

from sentinel_core import ConfigError, load_config
from sentinel_core.identity._client_address import MAX_HEADER_LENGTH, ClientAddresses
from tests.support.http import Headers

pytestmark = pytest.mark.security

PROXIES = ClientAddresses(
    [ipaddress.ip_network("192.0.2.0/24"), ipaddress.ip_network("2001:db8:ffff::/48")]
)
PROXY = "192.0.2.10"


def resolve(headers: Mapping[str, str], peer: str | None = PROXY) -> str | None:
    return PROXIES.resolve(peer, Headers(dict(headers)))


@pytest.mark.parametrize(
    ("forwarded_for", "client"),
    [
        ("198.51.100.1", "198.51.100.1"),
        ("198.51.100.1, 192.0.2.11", "198.51.100.1"),  # our second proxy is skipped
        ("6.6.6.6, 198.51.100.1", "198.51.100.1"),  # a client-written hop is ignored
        ("garbage, 198.51.100.1", "198.51.100.1"),  # left of the client: never read
        ("192.0.2.12, 192.0.2.11", "192.0.2.12"),  # only proxies: the leftmost
        ("198.51.100.1:4711", "198.51.100.1"),
        ("[2001:db8::1]:4711", "2001:db8::1"),
        ("[2001:db8::1]", "2001:db8::1"),
        ("2001:db8::1", "2001:db8::1"),
        ("::ffff:198.51.100.1", "198.51.100.1"),
        ("198.51.100.1, garbage", PROXY),  # unreadable hop on the walk: the peer
        ("198.51.100.1, unknown", PROXY),
        ("198.51.100.1,", PROXY),
        ("[2001:db8::1", PROXY),
        ('"198.51.100.1"', PROXY),
        ("1.2.3.4, " * (MAX_HEADER_LENGTH // 8) + "198.51.100.1", PROXY),
    ],
)
def test_x_forwarded_for_from_a_trusted_proxy(forwarded_for: str, client: str) -> None:
    assert resolve({"X-Forwarded-For": forwarded_for}) == client


@pytest.mark.parametrize(
    ("forwarded", "client"),
    [
        ("for=198.51.100.1", "198.51.100.1"),
        ('for="[2001:db8:cafe::17]:4711"', "2001:db8:cafe::17"),
        ('for="198.51.100.1:80";proto=https;by=192.0.2.10', "198.51.100.1"),
        ("For=198.51.100.1 , for=192.0.2.11", "198.51.100.1"),
        ("for=6.6.6.6, for=198.51.100.1", "198.51.100.1"),
        ("for=198.51.100.1,, ,", "198.51.100.1"),  # empty list elements are skipped
        ('for="198.51.100.\\1"', "198.51.100.1"),  # a quoted-pair
        ('for="[2001:db8:ffff::1]", for=192.0.2.11', "2001:db8:ffff::1"),  # all proxies
        ("for=unknown", PROXY),
        ("for=_hidden", PROXY),
        ("proto=https", PROXY),  # no for= on the walked hop
        ("for=198.51.100.1;for=198.51.100.2", PROXY),  # a parameter twice
        ('for="198.51.100.1', PROXY),  # unbalanced quote: every split is ambiguous
        ('for="x, for=198.51.100.1', PROXY),
        ("for=198.51.100.1 for=198.51.100.2", PROXY),
        ("for=[2001:db8::1]", PROXY),  # brackets must be quoted
        (",", PROXY),
        ("for=1.2.3.4," * (MAX_HEADER_LENGTH // 10) + "for=198.51.100.1", PROXY),
    ],
)
def test_forwarded_from_a_trusted_proxy(forwarded: str, client: str) -> None:
    assert resolve({"Forwarded": forwarded}) == client


def test_forwarding_headers_are_never_read_without_trusted_proxies() -> None:
    headers = Headers({"X-Forwarded-For": "198.51.100.1", "Forwarded": "for=198.51.100.1"})
    assert ClientAddresses([]).resolve(PROXY, headers) == PROXY


@pytest.mark.parametrize("peer", ["203.0.113.5", "not-an-address", None, "::ffff:203.0.113.5"])
def test_forwarding_headers_from_an_untrusted_peer_are_ignored(peer: str | None) -> None:
    assert resolve({"X-Forwarded-For": "198.51.100.1"}, peer=peer) == peer


@pytest.mark.parametrize("peer", ["::ffff:192.0.2.10", "[2001:db8:ffff::5]", "fe80::1%eth0"])
def test_trusted_peers_in_every_spelling(peer: str) -> None:
    proxies = ClientAddresses(
        [
            ipaddress.ip_network("192.0.2.0/24"),
            ipaddress.ip_network("2001:db8:ffff::/48"),
            ipaddress.ip_network("fe80::/64"),
        ]
    )
    assert proxies.resolve(peer, Headers({"X-Forwarded-For": "198.51.100.1"})) == "198.51.100.1"


def test_no_forwarding_header_from_a_trusted_proxy_leaves_the_peer() -> None:
    assert resolve({}) == PROXY


@pytest.mark.parametrize(
    ("forwarded", "forwarded_for", "client"),
    [
        ("for=198.51.100.1", "198.51.100.1", "198.51.100.1"),
        ("for=6.6.6.6", "198.51.100.1", PROXY),  # one passed through from the client
        ("for=unknown", "198.51.100.1", PROXY),
    ],
)
def test_both_headers_must_name_the_same_client(
    forwarded: str, forwarded_for: str, client: str
) -> None:
    assert resolve({"Forwarded": forwarded, "X-Forwarded-For": forwarded_for}) == client


class MultiHeaders(Mapping[str, str]):
    """A header mapping that keeps repeated lines (``getlist``, as Starlette's)."""

    def __init__(self, lines: list[tuple[str, str]]) -> None:
        self._lines = lines

    def __getitem__(self, name: str) -> str:
        return next(v for k, v in self._lines if k.lower() == name.lower())

    def __iter__(self) -> Iterator[str]:
        return iter(k for k, _ in self._lines)

    def __len__(self) -> int:
        return len(self._lines)

    def getlist(self, name: str) -> list[str]:
        return [v for k, v in self._lines if k.lower() == name.lower()]


def test_a_header_on_several_lines_is_read_whole() -> None:
    lines = [("X-Forwarded-For", "6.6.6.6"), ("x-forwarded-for", "198.51.100.1")]
    assert PROXIES.resolve(PROXY, MultiHeaders(lines)) == "198.51.100.1"
    assert PROXIES.resolve(PROXY, MultiHeaders([])) == PROXY


def test_trusted_proxies_config_is_a_list_of_networks() -> None:
    base = {
        "redis_url": "memory://",
        "policies": {"a": {"algorithm": "token_bucket", "rate": "1/second", "fail_mode": "closed"}},
    }
    config = load_config({**base, "trusted_proxies": ["10.0.0.0/8", "2001:db8::/32", "192.0.2.1"]})
    assert [str(n) for n in config.trusted_proxies] == [
        "10.0.0.0/8",
        "2001:db8::/32",
        "192.0.2.1/32",
    ]
    assert load_config(base).trusted_proxies == ()
    for value, path, message in [
        ("10.0.0.0/8", "trusted_proxies", "expected a list"),
        (["10.0.0.1/8"], "trusted_proxies.0", "did you mean '10.0.0.0/8'"),
        (["nope"], "trusted_proxies.0", "not a CIDR network"),
        ([10], "trusted_proxies.0", "expected a CIDR network string"),
        (["10.0.0.0/8"] * 1025, "trusted_proxies", "at most 1024"),
    ]:
        with pytest.raises(ConfigError, match=message) as caught:
            load_config({**base, "trusted_proxies": value})
        assert caught.value.path == path


def test_the_memory_of_judged_hops_is_bounded() -> None:
    proxies = ClientAddresses([ipaddress.ip_network("192.0.2.0/24")])
    for n in range(5000):  # past the 4096 remembered: forgotten, then judged again
        client = f"10.{n // 256 % 256}.{n % 256}.1"
        assert proxies.resolve(PROXY, Headers({"X-Forwarded-For": client})) == client
    assert proxies.resolve(PROXY, Headers({"X-Forwarded-For": "10.0.0.1"})) == "10.0.0.1"
