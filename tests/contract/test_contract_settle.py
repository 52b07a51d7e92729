"""``sentinel_core.settle(units)`` in a request, through every adapter (SPEC §2
``settle``): the units a handler reports are charged after the response, instead of
the reservation (``cost`` 10 of a window of 100 a day), from sync and async handlers, from
streamed bodies (each chunk reports), from a handler that raises, and after ``count``.

What a request left is read from the next request's RateLimit ``r``: the window's 100,
less what earlier requests were charged, less this request's reservation.
"""

from __future__ import annotations

import pytest

from tests.contract.conftest import Build
from tests.contract.harness import Reply
from tests.contract.test_contract import AUTH, contract_config, remaining


@pytest.fixture(params=["redis", "memory"])
def url(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue("redis_url")) if request.param == "redis" else "memory://"


def send(build: Build, url: str, *requests: tuple[str, str]) -> list[Reply]:
    client = build(contract_config(url))
    return [client.request(method, path, headers=AUTH) for method, path in requests]


@pytest.mark.parametrize("path", ["/usage", "/usage-sync"])
def test_the_units_a_handler_reports_are_charged(build: Build, url: str, path: str) -> None:
    replies = send(build, url, ("POST", f"{path}/25"), ("POST", f"{path}/3"), ("POST", "/usage/0"))
    assert [reply.status for reply in replies] == [200, 200, 200]
    # the headers leave before the body: they tell the reservation
    assert [remaining(reply) for reply in replies] == [90, 100 - 25 - 10, 100 - 28 - 10]


@pytest.mark.parametrize("path", ["/usage-stream", "/usage-astream"])
def test_a_streamed_body_reports_as_it_goes(build: Build, url: str, path: str) -> None:
    replies = send(build, url, ("GET", f"{path}/4"), ("POST", "/usage/0"))
    assert [reply.status for reply in replies] == [200, 200]
    assert replies[0].body == b"abc"
    assert [remaining(reply) for reply in replies] == [90, 100 - 12 - 10]


def test_a_raising_handler_is_charged_what_it_reported(build: Build, url: str) -> None:
    replies = send(build, url, ("POST", "/usage-raise/7"), ("POST", "/usage/0"))
    assert [reply.status for reply in replies] == [500, 200]
    assert remaining(replies[1]) == 100 - 7 - 10


def test_count_applies_first(build: Build, url: str) -> None:
    """200 is not counted: the reservation is refunded; 404 is, at the 7 reported."""
    replies = send(
        build,
        url,
        ("POST", "/usage-count/200"),
        ("POST", "/usage-count/404"),
        ("POST", "/usage-count/200"),
    )
    assert [reply.status for reply in replies] == [200, 404, 200]
    assert [remaining(reply) for reply in replies] == [90, 90, 100 - 7 - 10]


def test_an_excess_puts_the_window_in_debt(build: Build, url: str) -> None:
    replies = send(build, url, ("POST", "/usage/500"), ("POST", "/usage/0"))
    assert [reply.status for reply in replies] == [200, 429]
    assert int(replies[1].header("retry-after") or 0) > 3_600
