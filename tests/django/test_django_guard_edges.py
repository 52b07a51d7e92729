"""Django edges: the memory store shared by sync and async views, settings without
``routes``, process_view outside URL resolution, a decorator's denial under the
middleware, views that return something other than a response, and the loop-store
closer's invariant."""

from __future__ import annotations

import functools
import gc
import json
import weakref
from collections.abc import Callable
from typing import Any

import pytest
from django.http import HttpRequest, JsonResponse
from django.test import Client, RequestFactory
from django.urls import ResolverMatch, resolve
from django.utils.decorators import decorator_from_middleware
from django_harness import Configure, LoopRunner, PeerAsyncClient
from djproject import views

from sentinel_django import _loops, rate_limited
from sentinel_django.middleware import SentinelMiddleware
from tests.support.adapter_config import bearer, spec_config

AUTH = bearer("acme")


def test_memory_store_is_one_bucket_for_sync_and_async_views(configure: Configure) -> None:
    configure(redis_url="memory://")
    runner = LoopRunner()
    try:
        sync = [Client().post("/v1/ingest", headers={"Authorization": AUTH}) for _ in range(2)]
        asynchronous = [
            runner.run(PeerAsyncClient().post("/async/ingest", headers={"Authorization": AUTH}))
            for _ in range(2)
        ]
        assert _loops.live_store_count() == 0  # no per-loop Redis store for memory://
    finally:
        runner.close()

    assert [r.status_code for r in sync + asynchronous] == [200, 200, 200, 429]
    assert json.loads(asynchronous[0].content)["view"] == "async"


def test_without_routes_the_middleware_guards_nothing_and_decorators_still_do(
    configure: Configure,
) -> None:
    configure(routes={})
    client = Client()
    items = [client.get("/items/1", headers={"Authorization": AUTH}) for _ in range(5)]
    ingests = [client.post("/v1/ingest", headers={"Authorization": AUTH}) for _ in range(4)]

    assert [r.status_code for r in items] == [200] * 5
    assert "RateLimit" not in items[0]
    assert [r.status_code for r in ingests] == [200, 200, 200, 429]


def test_without_routes_the_async_middleware_passes_an_undecorated_view_untouched(
    configure: Configure,
) -> None:
    configure(routes={})
    runner = LoopRunner()
    try:
        responses = [
            runner.run(PeerAsyncClient().post("/async-items/1", headers={"Authorization": AUTH}))
            for _ in range(5)
        ]
    finally:
        runner.close()

    assert [r.status_code for r in responses] == [200] * 5
    assert "RateLimit" not in responses[0]
    assert json.loads(responses[0].content)["view"] == "async item 1"


def test_process_view_outside_url_resolution_guards_nothing(configure: Configure) -> None:
    """``decorator_from_middleware`` runs ``process_view`` on a request that no URLconf
    resolved: without a route template there is no ``routes`` entry to apply."""
    configure(routes={"GET items/<int:pk>": "resumint.tailor"})

    def item(request: HttpRequest) -> JsonResponse:
        return JsonResponse({"ok": True})

    view = decorator_from_middleware(SentinelMiddleware)(item)
    request = RequestFactory().get("/items/1", headers={"Authorization": AUTH})
    responses = [view(request) for _ in range(5)]

    assert [r.status_code for r in responses] == [200] * 5
    assert "RateLimit" not in responses[0]


def test_a_decorators_denial_under_an_allowing_middleware_keeps_its_own_headers(
    configure: Configure,
) -> None:
    policies = {
        **spec_config("memory://")["policies"],
        "bulk.api": {"algorithm": "token_bucket", "rate": "100/minute", "fail_mode": "closed"},
    }
    # The middleware allows (bulk.api), the view's decorator denies its 4th request.
    configure(policies=policies, routes={"POST v1/tailor": "bulk.api"})
    client = Client()
    responses = [client.post("/v1/tailor", headers={"Authorization": AUTH}) for _ in range(4)]

    assert [r.status_code for r in responses] == [200, 200, 200, 429]
    assert '"bulk.api"' in responses[0]["RateLimit"]
    assert '"resumint.tailor"' in responses[0]["RateLimit"]
    denial = responses[3]
    assert denial["RateLimit"].startswith('"resumint.tailor"')
    assert '"bulk.api"' not in denial["RateLimit"]
    assert denial["Content-Type"] == "application/problem+json"


def test_a_sync_view_returning_no_response_gets_its_value_back_and_is_limited(
    configure: Configure,
) -> None:
    configure()

    @rate_limited("pdftalk.ingest")
    def payload(request: HttpRequest) -> dict[str, Any]:
        return {"kind": "payload"}

    request = RequestFactory().post("/x", headers={"Authorization": AUTH})
    results = [payload(request) for _ in range(4)]

    assert results[:3] == [{"kind": "payload"}] * 3
    assert results[3].status_code == 429


async def test_an_async_view_returning_no_response_gets_its_value_back_and_is_limited(
    configure: Configure,
) -> None:
    configure()

    @rate_limited("pdftalk.ingest")
    async def payload(request: HttpRequest) -> str:
        return "payload"

    request = RequestFactory().post("/x", headers={"Authorization": AUTH})
    results = [await payload(request) for _ in range(4)]

    assert results[:3] == ["payload"] * 3
    assert results[3].status_code == 429


@functools.cache
def _ingest_route() -> ResolverMatch:
    # Resolved once, away from any request: on Python 3.10, `resolve` leaves a reference
    # cycle behind (asgiref's Local raising AttributeError through a contextlib generator)
    # that holds its callers' frames, and the requests in them, until the collector runs.
    return resolve("/items/1")


def _through_the_middleware(request: HttpRequest) -> Any:
    def handler(request: HttpRequest) -> Any:
        match = request.resolver_match
        return middleware.process_view(request, match.func, (), match.kwargs) or match.func(
            request, **match.kwargs
        )

    middleware = SentinelMiddleware(handler)
    request.resolver_match = _ingest_route()
    return middleware(request)


@pytest.mark.parametrize("requests", [1, 4], ids=["admitted", "refused"])
@pytest.mark.parametrize(
    "serve", [views.ingest, _through_the_middleware], ids=["decorator", "middleware"]
)
def test_a_request_is_freed_as_soon_as_nothing_refers_to_it(
    configure: Configure, requests: int, serve: Callable[[HttpRequest], Any]
) -> None:
    """Nothing Sentinel keeps on a request refers back to it once its passage is over,
    so a flood of requests never waits on the garbage collector to be freed."""
    configure(redis_url="memory://")
    _ingest_route()
    freed = []
    gc.disable()
    try:
        for _ in range(requests):
            request = RequestFactory().post("/items/1", headers={"Authorization": AUTH})
            status = serve(request).status_code
            freed.append(weakref.ref(request))
            del request
        alive = [ref() is not None for ref in freed]
    finally:
        gc.enable()

    assert status == (200 if requests == 1 else 429)
    assert alive == [False] * requests


class _Suspend:
    """An awaitable that suspends once, as awaiting I/O would."""

    def __await__(self) -> Any:
        yield


def test_a_store_closer_that_awaits_before_its_first_yield_is_refused() -> None:
    async def awaits_first() -> Any:
        await _Suspend()
        yield

    with pytest.raises(RuntimeError, match="awaited before its first yield"):
        _loops._start(awaits_first())
