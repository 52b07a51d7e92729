"""`sentinel_core.testing.ratelimit_headers` (SPEC §9): RateLimit fields parsed as
Structured Field Values (RFC 9651), and refused when they are not valid ones.

The adapters' real responses are parsed in the contract suite (tests/contract) and the
packaging test's user suite; here, the parser against hand-written fields.
"""

from __future__ import annotations

import datetime

import pytest

from sentinel_core.testing import ratelimit_headers
from sentinel_core.testing._structured import Item, parse_list

PK = b"\x01\x02\x03\xfe"
PK_FIELD = ":AQID/g==:"


def test_a_responses_fields_become_plain_values() -> None:
    headers = {
        "RateLimit-Policy": f'"api.search";q=10;w=60;pk={PK_FIELD}',
        "RateLimit": f'"api.search";r=7;t=12;pk={PK_FIELD}',
        "Content-Type": "application/json",
    }

    assert ratelimit_headers(headers) == {
        "policy": {"api.search": {"q": 10, "w": 60, "pk": PK}},
        "state": {"api.search": {"r": 7, "t": 12, "pk": PK}},
    }


def test_names_are_case_insensitive_and_absent_fields_are_empty() -> None:
    assert ratelimit_headers({"ratelimit": '"a";r=0'}) == {
        "policy": {},
        "state": {"a": {"r": 0}},
    }
    assert ratelimit_headers({"RATELIMIT-POLICY": '"a";q=1'})["policy"] == {"a": {"q": 1}}
    assert ratelimit_headers({}) == {"policy": {}, "state": {}}


def test_pairs_in_bytes_as_asgi_sends_them_and_a_field_on_several_lines() -> None:
    headers = [
        (b"ratelimit-policy", b'"a";q=2;w=1'),
        (b"content-length", b"2"),
        (b"RateLimit-Policy", b'"b";q=5;w=60'),
        (b"ratelimit-policy", b" "),
    ]

    assert ratelimit_headers(headers)["policy"] == {"a": {"q": 2, "w": 1}, "b": {"q": 5, "w": 60}}


def test_a_list_of_several_members_with_every_kind_of_parameter() -> None:
    field = (
        '"day";q=1000;w=86400;qu="requests", '
        'burst;q=10;w=1;flag;off=?0;ratio=0.25;at=@1700000000;label=%"caf%c3%a9";tok=a:b/c'
    )

    policy = ratelimit_headers({"RateLimit-Policy": field})["policy"]

    assert policy["day"] == {"q": 1000, "w": 86400, "qu": "requests"}
    assert policy["burst"] == {
        "q": 10,
        "w": 1,
        "flag": True,
        "off": False,
        "ratio": 0.25,
        "at": datetime.datetime(2023, 11, 14, 22, 13, 20, tzinfo=datetime.timezone.utc),
        "label": "café",
        "tok": "a:b/c",
    }


def test_the_list_grammar_around_members() -> None:
    assert parse_list("") == []
    assert parse_list("  1 ,\t-2  ") == [Item(1), Item(-2)]
    assert parse_list('("a" b);x=1, ()') == [
        Item((Item("a"), Item("b")), {"x": 1}),
        Item(()),
    ]
    assert parse_list('"\\"q\\" \\\\"') == [Item('"q" \\')]
    assert parse_list(":YQ:, :YWI=:, :YWJj:") == [Item(b"a"), Item(b"ab"), Item(b"abc")]
    assert parse_list("a;k=1;k=2") == [Item("a", {"k": 2})]
    assert parse_list("a; *k-_.9") == [Item("a", {"*k-_.9": True})]
    assert parse_list("-1.5, 123456789012.123, 999999999999999") == [
        Item(-1.5),
        Item(123456789012.123),
        Item(999999999999999),
    ]


INVALID = [
    pytest.param('"a";r=1,', id="trailing comma"),
    pytest.param('"a";r=1 "b";r=2', id="members without a comma"),
    pytest.param('"a";r=1, , "b";r=2', id="empty member"),
    pytest.param('\t"a";r=1', id="leading tab"),
    pytest.param('"a', id="unclosed string"),
    pytest.param('"a\\n";r=1', id="bad escape"),
    pytest.param('"caf\u00e9";r=1', id="non-ASCII string"),
    pytest.param('"a";R=1', id="uppercase key"),
    pytest.param('"a";=1', id="empty key"),
    pytest.param('"a";r=', id="parameter without value"),
    pytest.param('"a";r=1.', id="decimal ending with a dot"),
    pytest.param('"a";r=1.2345', id="four fractional digits"),
    pytest.param('"a";r=1234567890123.5', id="thirteen integer digits"),
    pytest.param('"a";r=1234567890123456', id="sixteen digits"),
    pytest.param('"a";r=1.2.3', id="two dots"),
    pytest.param('"a";r=-', id="minus alone"),
    pytest.param('"a";pk=:AQID', id="unclosed byte sequence"),
    pytest.param('"a";pk=:AQ*D:', id="byte sequence outside base64"),
    pytest.param('"a";pk=:A:', id="byte sequence of impossible length"),
    pytest.param('"a";pk=:A=B=:', id="padding inside a byte sequence"),
    pytest.param('"a";x=?2', id="boolean neither 0 nor 1"),
    pytest.param('"a";x=?', id="boolean cut short"),
    pytest.param('"a";x=@1.5', id="decimal date"),
    pytest.param('"a";x=%"%C3%A9"', id="uppercase hex in a display string"),
    pytest.param('"a";x=%"%c3"', id="display string not UTF-8"),
    pytest.param('"a";x=%"%c"', id="percent cut short"),
    pytest.param('"a";x=%"caf\u00e9"', id="non-ASCII display string"),
    pytest.param('"a";x=%"open', id="unclosed display string"),
    pytest.param('"a";x=%a', id="display string without quote"),
    pytest.param("(1 2", id="unclosed inner list"),
    pytest.param("(", id="inner list cut short"),
    pytest.param("(1,2)", id="comma in an inner list"),
    pytest.param("<a>", id="not an item"),
]


@pytest.mark.parametrize("field", INVALID)
def test_invalid_structured_fields_are_refused(field: str) -> None:
    with pytest.raises(ValueError, match="position"):
        ratelimit_headers({"RateLimit": field})


BAD_VALUES = [
    pytest.param("RateLimit", '"a";r=-1', "r=-1", id="negative r"),
    pytest.param("RateLimit", '"a";r=1;t=2.5', "t=2.5", id="decimal t"),
    pytest.param("RateLimit", '"a";r="1"', "r='1'", id="string r"),
    pytest.param("RateLimit", '"a";r', "r=True", id="boolean r"),
    pytest.param("RateLimit", '"a";t=1', "no 'r'", id="missing r"),
    pytest.param("RateLimit-Policy", '"a";w=1', "no 'q'", id="missing q"),
    pytest.param("RateLimit-Policy", '"a";q=1;w=?1', "w=True", id="boolean w"),
    pytest.param("RateLimit-Policy", "1;q=1", "not a policy name", id="integer name"),
    pytest.param("RateLimit-Policy", '("a");q=1', "not a policy name", id="inner list"),
    pytest.param("RateLimit-Policy", '"a";q=1, a;q=2', "twice", id="duplicate name"),
]


@pytest.mark.parametrize(("name", "field", "says"), BAD_VALUES)
def test_members_without_a_name_or_with_counts_that_are_not_integers_are_refused(
    name: str, field: str, says: str
) -> None:
    with pytest.raises(ValueError, match=f"{name}: .*{says}"):
        ratelimit_headers({name: field})
