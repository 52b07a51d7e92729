"""The client address behind trusted proxies (SPEC §2 ``trusted_proxies``), as a table:
who may forward, which hop is the client, and what unreadable headers fall back to.

The adapters' suites (tests/{fastapi,flask,django}/test_*_exempt_proxies.py) show the
same rules end to end on a real Redis; here every parsing branch is pinned.
"""

from __future__ import annotations

import ipaddress
import logging
import timeit
from collections.abc import Iterator, Mapping

import pytest

from sentinel_core import ConfigError, load_config
from sentinel_core.identity._client_address import MAX_HEADER_LENGTH, ClientAddresses
from tests.support.http import Headers, make_sentinel

pytestmark = pytest.mark.security

PROXIES = ClientAddresses(
    [ipaddress.ip_network("192.0.2.0/24"), ipaddress.ip_network("2001:db8:ffff::/48")]
)
PROXY = "192.0.2.10"


def resolve(headers: Mapping[str, str], peer: str | None = PROXY) -> str | None:
    return PROXIES.resolve(peer, Headers(dict(headers))).address


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
        # Quoted values are found from the left: a comma inside one splits nothing.
        ('for=6.6.6.6;host="x, for=198.51.100.9"', "6.6.6.6"),
        ('for=198.51.100.1;host="a,b";proto=https', "198.51.100.1"),
        ('host="x";for="198.51.100.1"', "198.51.100.1"),
        ("for=198.51.100.1, ;;, ;", "198.51.100.1"),  # elements of empty pairs
        ("for=198.51.100.1;;proto=https;", "198.51.100.1"),  # empty pairs
        ('host="x\\"y";for=198.51.100.1', "198.51.100.1"),  # an escaped quote
        ('a=b"c", for=198.51.100.1', PROXY),  # a quote that opens no value
        ('for="198.51.100.1\\', PROXY),  # a quoted-pair cut short: never closed
        ('x="y"z", for=198.51.100.1', PROXY),
        ("for=198.51.100.1\x01", PROXY),  # a control character
        ('h="x",' * 40 + "for=198.51.100.1", PROXY),  # more quotes than 32 values
        ("a=b;" * 16 + "for=198.51.100.1", PROXY),  # more pairs than a proxy writes
        ("for=6.6.6.6, proto=https", PROXY),  # the walked element has no for=
    ],
)
def test_forwarded_from_a_trusted_proxy(forwarded: str, client: str) -> None:
    assert resolve({"Forwarded": forwarded}) == client


@pytest.mark.parametrize(
    ("headers", "client"),
    [
        ({"X-Forwarded-For": "198.51.100.1"}, ("198.51.100.1", False)),
        ({"Forwarded": "for=198.51.100.1"}, ("198.51.100.1", False)),
        ({}, (PROXY, False)),  # the proxy's own request: its address, readable
        ({"X-Forwarded-For": "192.0.2.12, 192.0.2.11"}, ("192.0.2.12", False)),
        ({"X-Forwarded-For": "6.6.6.6, " * 1024 + "198.51.100.1"}, (PROXY, True)),
        ({"Forwarded": 'for="198.51.100.1'}, (PROXY, True)),
        ({"Forwarded": "for=unknown"}, (PROXY, True)),
        ({"Forwarded": "for=6.6.6.6", "X-Forwarded-For": "198.51.100.1"}, (PROXY, True)),
        ({"X-Forwarded-For": "192.0.2.11, " * 40 + "192.0.2.12"}, (PROXY, True)),
    ],
)
def test_an_unreadable_header_is_the_proxys_address_marked_unreadable(
    headers: dict[str, str], client: tuple[str, bool]
) -> None:
    """SPEC §4: limited as the proxy's own address, and never exempt (`HttpLayer`
    asks no network exemption for it); a walk crossing more than `MAX_HOPS` trusted
    proxies is unreadable too."""
    assert PROXIES.resolve(PROXY, Headers(headers)) == client


NASTY_FORWARDED = {
    "many_elements": ",".join(["for=1.2.3.4"] * 800),
    "many_pairs": ";".join(f"a{n}=b" for n in range(1000)),
    "empty_elements": "," * MAX_HEADER_LENGTH,
    "empty_pairs": ";," * MAX_HEADER_LENGTH,
    "blanks": "for=1.2.3.4" + " " * MAX_HEADER_LENGTH,
    "blanks_then_garbage": "for=1.2.3.4;" + " ; " * 3000,
    "long_quoted_value": 'for="' + "x" * MAX_HEADER_LENGTH,
    "quoted_pairs": 'for="' + "\\a" * MAX_HEADER_LENGTH,
    "quotes": '="' * MAX_HEADER_LENGTH,
    "many_quoted_values": ";".join(f'a{n}="x"' for n in range(1000)),
}


@pytest.mark.parametrize("junk", NASTY_FORWARDED)
@pytest.mark.parametrize("where", ["left", "right"])
def test_an_8_kib_forwarded_header_costs_microseconds_not_milliseconds(
    junk: str, where: str
) -> None:
    """Issue 26: 5 ms to parse an 8 KiB ``Forwarded`` header before ignoring it. The
    client writes the left part; the right one is our proxy's (or junk, to be sure)."""
    ours = "for=198.51.100.1"
    room = MAX_HEADER_LENGTH - len(ours) - 2
    text = NASTY_FORWARDED[junk][:room]
    value = f"{text}, {ours}" if where == "left" else f"{ours}, {text}"
    headers = Headers({"Forwarded": value})
    proxies = ClientAddresses([ipaddress.ip_network("192.0.2.0/24")])
    best = min(timeit.repeat(lambda: proxies.resolve(PROXY, headers), number=20, repeat=5))
    assert best / 20 < 0.001


def test_a_list_that_trusts_every_address_is_a_warning_when_built(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="sentinel"):
        ClientAddresses([ipaddress.ip_network("10.0.0.0/8")])
        assert caplog.records == []
        make_sentinel(
            {
                "redis_url": "memory://",
                "trusted_proxies": ["0.0.0.0/0", "::/0"],
                "policies": {
                    "a": {"algorithm": "token_bucket", "rate": "1/second", "fail_mode": "closed"}
                },
            }
        )
    assert [record.getMessage().split(",")[0] for record in caplog.records] == [
        "trusted_proxies contains 0.0.0.0/0",
        "trusted_proxies contains ::/0",
    ]
    assert "any client can write the Forwarded or X-Forwarded-For address" in caplog.text


def test_forwarding_headers_are_never_read_without_trusted_proxies() -> None:
    headers = Headers({"X-Forwarded-For": "198.51.100.1", "Forwarded": "for=198.51.100.1"})
    assert ClientAddresses([]).resolve(PROXY, headers) == (PROXY, False)


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
    assert proxies.resolve(peer, Headers({"X-Forwarded-For": "198.51.100.1"})).address == (
        "198.51.100.1"
    )


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
    assert PROXIES.resolve(PROXY, MultiHeaders(lines)) == ("198.51.100.1", False)
    assert PROXIES.resolve(PROXY, MultiHeaders([])) == (PROXY, False)


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
        assert proxies.resolve(PROXY, Headers({"X-Forwarded-For": client})).address == client
    assert proxies.resolve(PROXY, Headers({"X-Forwarded-For": "10.0.0.1"})).address == "10.0.0.1"
