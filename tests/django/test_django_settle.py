"""Streamed bodies of a settle policy under Django's ASGI handler (``AsyncClient``):
each chunk's ``sentinel_core.settle`` counts, the sync body's from the thread Django
iterates it in, and the request is settled once the body is done."""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any

import pytest
from django.test import AsyncClient, override_settings
from django_harness import Configure

from sentinel_core.testing import ratelimit_headers
from tests.support.adapter_config import bearer

AUTH = {"Authorization": bearer("acme", expires_in=3600)}
USAGE = {
    "algorithm": "sliding_window",
    "rate": "100/day",
    "cost": 10,
    "fail_mode": "closed",
    "settle": True,
}


@pytest.fixture
def usage(configure: Configure) -> Any:
    config = configure(routes={})
    policies = {**config["policies"], "usage": USAGE}
    with override_settings(
        SENTINEL={**config, "policies": policies}, ROOT_URLCONF="djproject.settle_urls"
    ):
        yield


async def body(response: Any) -> bytes:
    """The body as the ASGI handler reads it: an async one on the loop, a sync one in a
    thread (whose context is not the view's)."""
    content = response.streaming_content
    if hasattr(content, "__aiter__"):
        return b"".join([chunk async for chunk in content])
    return await asyncio.to_thread(lambda: contextvars.Context().run(b"".join, content))


def remaining(response: Any) -> int:
    (state,) = ratelimit_headers(response.headers)["state"].values()
    r = state["r"]
    assert isinstance(r, int)
    return r


@pytest.mark.usefixtures("usage")
@pytest.mark.parametrize("path", ["/stream", "/astream"])
async def test_a_streamed_body_reports_its_units_under_asgi(path: str) -> None:
    client = AsyncClient()
    first = await client.get(path, headers=AUTH)
    assert await body(first) == b"ab"
    second = await client.get(path, headers=AUTH)
    await body(second)

    assert [remaining(first), remaining(second)] == [90, 100 - 12 - 10]
