"""The completion step in Django: a concurrency lease goes back when the response is
over: a streamed body at its end, on an error or when the server closes it early; a
view that raises, with or without the middleware."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from django.http import HttpRequest, HttpResponse
from django.test import AsyncClient, Client, RequestFactory, override_settings
from django_harness import Configure

from sentinel_django import rate_limited
from tests.support.adapter_config import bearer

AUTH = {"Authorization": bearer("acme", expires_in=3600)}
SLOTS = {"algorithm": "concurrency", "limit": 1, "fail_mode": "closed"}


@pytest.fixture
def slots(configure: Configure) -> Any:
    config = configure(routes={})
    policies = {**config["policies"], "slots": SLOTS}
    with override_settings(
        SENTINEL={**config, "policies": policies}, ROOT_URLCONF="djproject.lifecycle_urls"
    ):
        yield


@pytest.mark.usefixtures("slots")
@pytest.mark.parametrize("query", ["", "?fail=1"], ids=["whole", "failing"])
def test_a_sync_stream_hands_the_lease_back_when_its_body_is_done(query: str) -> None:
    client = Client(raise_request_exception=False)
    response = client.get(f"/stream{query}", headers=AUTH)
    busy = client.get("/plain", headers=AUTH)
    with pytest.raises(RuntimeError) if query else contextlib.nullcontext():
        b"".join(response.streaming_content)
    response.close()

    assert busy.status_code == 429
    assert client.get("/plain", headers=AUTH).status_code == 200


@pytest.mark.usefixtures("slots")
def test_a_stream_the_server_closes_early_hands_the_lease_back() -> None:
    client = Client()
    response = client.get("/stream", headers=AUTH)
    response.close()  # the client went away before the body was sent

    assert client.get("/plain", headers=AUTH).status_code == 200


@pytest.mark.usefixtures("slots")
@pytest.mark.parametrize("query", ["", "?fail=1"], ids=["whole", "failing"])
async def test_an_async_stream_hands_the_lease_back_when_its_body_is_done(query: str) -> None:
    client = AsyncClient()
    response = await client.get(f"/astream{query}", headers=AUTH)
    busy = await client.get("/plain", headers=AUTH)
    with pytest.raises(RuntimeError) if query else contextlib.nullcontext():
        async for _ in response.streaming_content:
            pass

    assert busy.status_code == 429
    assert (await client.get("/plain", headers=AUTH)).status_code == 200


@pytest.mark.usefixtures("slots")
def test_a_view_that_raises_hands_its_lease_back_through_the_default_test_client() -> None:
    client = Client()  # re-raises the view's exception, as a project's tests see it

    for _ in range(2):
        with pytest.raises(RuntimeError, match="the view failed"):
            client.get("/boom", headers=AUTH)
    forbidden = [client.get("/forbidden", headers=AUTH).status_code for _ in range(2)]

    assert forbidden == [403, 403]
    assert client.get("/plain", headers=AUTH).status_code == 200


@pytest.mark.usefixtures("slots")
def test_a_head_request_pays_for_the_decorated_get_handler_once() -> None:
    client = Client()

    response = client.head("/report", headers=AUTH)

    assert response.status_code == 200
    assert response["RateLimit"].startswith('"slots";r=0')
    assert ", " not in response["RateLimit"]


@pytest.mark.usefixtures("slots")
def test_a_view_raising_without_the_middleware_hands_its_lease_back() -> None:
    @rate_limited("slots")
    def fail(request: HttpRequest) -> HttpResponse:
        raise RuntimeError("the view failed")

    @rate_limited("slots")
    def ok(request: HttpRequest) -> HttpResponse:
        return HttpResponse("ok")

    with pytest.raises(RuntimeError):
        fail(RequestFactory().get("/x", headers=AUTH))

    assert ok(RequestFactory().get("/x", headers=AUTH)).status_code == 200


@pytest.mark.usefixtures("slots")
async def test_an_async_view_raising_without_the_middleware_hands_its_lease_back() -> None:
    @rate_limited("slots")
    async def fail(request: HttpRequest) -> HttpResponse:
        raise RuntimeError("the view failed")

    @rate_limited("slots")
    async def ok(request: HttpRequest) -> str:
        return "ok"

    with pytest.raises(RuntimeError):
        await fail(RequestFactory().get("/x", headers=AUTH))

    @rate_limited("slots")
    async def page(request: HttpRequest) -> HttpResponse:
        return HttpResponse("page")

    assert await ok(RequestFactory().get("/x", headers=AUTH)) == "ok"
    assert (await page(RequestFactory().get("/x", headers=AUTH))).status_code == 200
    assert (await page(RequestFactory().get("/x", headers=AUTH))).status_code == 200
