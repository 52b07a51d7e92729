"""``sentinel_core.settle(units)`` inside a request (SPEC §2 ``settle``), framework-free:
the admission opens the request's meter, the handler reports into it (several calls add
up), and the completion settles every settle policy of the request in one script call
each, after ``count`` (an uncounted status refunds the whole reservation).
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

import sentinel_core
from sentinel_core import Sentinel
from sentinel_core.adapter import SERVER_ERROR, ametered, metered
from tests.support.http import make_sentinel, request_view
from tests.support.tokens import HS_SECRET, bearer, hs256

AUTH = {"authorization": bearer(hs256("tenant-a", ttl=3600))}


def policy(**fields: Any) -> dict[str, Any]:
    return {
        "algorithm": "sliding_window",
        "rate": "100/day",
        "cost": 10,
        "fail_mode": "closed",
        "settle": True,
        **fields,
    }


def build(url: str = "memory://") -> Sentinel:
    return make_sentinel(make_config(url))


def make_config(url: str) -> dict[str, Any]:
    return {
        "redis_url": url,
        "jwt": {"key": HS_SECRET},
        "policies": {
            "llm": policy(),
            "ocr": policy(algorithm="quota", rate="100/month", cost=1),
            "logins": policy(count=["4xx"], cost=5),
            "tight": {
                "algorithm": "token_bucket",
                "rate": "1/day",
                "burst": 1,
                "fail_mode": "closed",
            },
        },
    }


def used(sentinel: Sentinel, endpoint_id: str = "llm") -> int:
    """Units charged so far (peek tells what one more request would leave)."""
    if endpoint_id == "ocr":
        return sentinel.usage(endpoint_id, "tenant-a").used
    decision = sentinel.peek(endpoint_id, "tenant-a")
    return 100 - decision.remaining - sentinel.policy(endpoint_id).cost


@pytest.fixture(params=["memory", "redis"])
async def sentinel(request: pytest.FixtureRequest) -> AsyncIterator[Sentinel]:
    url = "memory://" if request.param == "memory" else request.getfixturevalue("redis_url")
    built = build(url)
    yield built
    built.close()
    await built.aclose()


def fresh(function: Any, *args: Any) -> Any:
    """``function(*args)`` in a new, empty context: outside any request."""
    return contextvars.Context().run(function, *args)


def task(coroutine: Any) -> Any:
    """``coroutine`` as a task with a new, empty context (a request of an ASGI server)."""
    return contextvars.Context().run(asyncio.ensure_future, coroutine)


def test_the_units_reported_are_charged_instead_of_the_reservation(sentinel: Sentinel) -> None:
    def request() -> None:
        admission = sentinel.admit(request_view(headers=AUTH), ["llm"])
        assert admission.allowed
        assert used(sentinel) == 10  # reserved
        sentinel_core.settle(30)
        sentinel_core.settle(12)  # several calls add up
        admission.complete(200)

    fresh(request)
    assert used(sentinel) == 42


def test_a_request_that_reports_nothing_stays_charged_at_its_reservation(
    sentinel: Sentinel,
) -> None:
    fresh(lambda: sentinel.admit(request_view(headers=AUTH), ["llm"]).complete(200))
    assert used(sentinel) == 10


def test_every_settle_policy_of_the_request_is_settled(sentinel: Sentinel) -> None:
    def request() -> None:
        admission = sentinel.admit(request_view(headers=AUTH), ["llm", "ocr"])
        sentinel_core.settle(3)
        admission.complete(200)

    fresh(request)
    assert used(sentinel) == 3
    assert used(sentinel, "ocr") == 3


def test_a_raising_handler_is_settled_at_what_it_reported(sentinel: Sentinel) -> None:
    def request() -> None:
        admission = sentinel.admit(request_view(headers=AUTH), ["llm"])
        sentinel_core.settle(25)
        admission.complete(SERVER_ERROR)

    fresh(request)
    assert used(sentinel) == 25


def test_count_applies_first_an_uncounted_status_refunds_the_reservation(
    sentinel: Sentinel,
) -> None:
    def request(status: int) -> None:
        admission = sentinel.admit(request_view(headers=AUTH), ["logins"])
        assert used(sentinel, "logins") in (5, 12)  # reserved now, whatever the status
        sentinel_core.settle(7)
        admission.complete(status)

    fresh(request, 200)
    assert used(sentinel, "logins") == 0
    fresh(request, 401)
    assert used(sentinel, "logins") == 7


def test_a_denial_by_another_policy_refunds_the_reservation(sentinel: Sentinel) -> None:
    fresh(lambda: sentinel.admit(request_view(headers=AUTH), ["tight"]).complete(200))
    denied = fresh(sentinel.admit, request_view(headers=AUTH), ["llm", "tight"])
    assert denied.denial is not None
    assert used(sentinel) == 0


def test_settle_outside_a_settle_request_says_so(sentinel: Sentinel) -> None:
    with pytest.raises(RuntimeError, match="no such request here"):
        fresh(sentinel_core.settle, 1)

    def plain_then_over() -> None:
        admission = sentinel.admit(request_view(headers=AUTH), ["tight"])
        assert admission.meter is None
        with pytest.raises(RuntimeError, match="settle = true"):
            sentinel_core.settle(1)
        admission.complete(200)
        settled = sentinel.admit(request_view(headers=AUTH), ["llm"])
        settled.complete(200)
        with pytest.raises(RuntimeError, match="no such request here"):
            sentinel_core.settle(1)  # that request is over

    fresh(plain_then_over)


@pytest.mark.parametrize(("bad", "error"), [(1.5, TypeError), ("3", TypeError), (True, TypeError)])
def test_settle_takes_an_int(sentinel: Sentinel, bad: Any, error: type[Exception]) -> None:
    def request() -> None:
        admission = sentinel.admit(request_view(headers=AUTH), ["llm"])
        with pytest.raises(error, match="units must be an int"):
            sentinel_core.settle(bad)
        with pytest.raises(ValueError, match="0 or more, got -2"):
            sentinel_core.settle(-2)
        admission.complete(200)

    fresh(request)
    assert used(sentinel) == 10


def test_two_admissions_of_one_request_share_its_meter(sentinel: Sentinel) -> None:
    def request() -> None:
        first = sentinel.admit(request_view(headers=AUTH), ["llm"])
        second = sentinel.admit(request_view(headers=AUTH), ["ocr"])
        assert first.meter is second.meter
        sentinel_core.settle(4)
        first.complete(200)
        second.complete(200)

    fresh(request)
    assert (used(sentinel), used(sentinel, "ocr")) == (4, 4)


def test_a_body_streamed_from_another_context_reports_through_metered(
    sentinel: Sentinel,
) -> None:
    def body() -> Iterator[bytes]:
        for _ in range(3):
            sentinel_core.settle(5)
            yield b"tokens"

    admission = fresh(sentinel.admit, request_view(headers=AUTH), ["llm"])
    chunks = fresh(list, metered(body(), admission.meter))  # a server's thread
    assert chunks == [b"tokens"] * 3
    admission.complete(200)
    assert used(sentinel) == 15


async def test_an_async_request_reports_from_its_tasks_and_threads(sentinel: Sentinel) -> None:
    async def body() -> AsyncIterator[bytes]:
        sentinel_core.settle(2)
        yield b"a"
        await asyncio.to_thread(sentinel_core.settle, 3)  # the thread gets a copy
        yield b"b"

    async def request() -> None:
        admission = await sentinel.aadmit(request_view(headers=AUTH), ["llm"])
        await asyncio.to_thread(sentinel_core.settle, 1)
        assert [chunk async for chunk in body()] == [b"a", b"b"]
        await admission.acomplete(200)

    await task(request())
    assert used(sentinel) == 6


async def test_an_async_body_streamed_elsewhere_reports_through_ametered(
    sentinel: Sentinel,
) -> None:
    async def body() -> AsyncIterator[bytes]:
        sentinel_core.settle(9)
        yield b"page"

    admission = await task(sentinel.aadmit(request_view(headers=AUTH), ["llm"]))

    async def serve() -> list[bytes]:
        return [chunk async for chunk in ametered(body(), admission.meter)]

    assert await task(serve()) == [b"page"]
    await admission.acomplete(200)
    assert used(sentinel) == 9
