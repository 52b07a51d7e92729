"""Views of a settle policy whose streamed bodies report their units (SPEC §2
``settle``), served through the ASGI handler: a sync body is iterated in a thread of
its own there, an async one on the event loop."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

from django.http import HttpRequest, StreamingHttpResponse
from django.urls import path

import sentinel_core
from sentinel_django import rate_limited


def _chunks() -> Iterator[bytes]:
    for chunk in (b"a", b"b"):
        sentinel_core.settle(6)
        yield chunk


async def _achunks() -> AsyncIterator[bytes]:
    for chunk in (b"a", b"b"):
        sentinel_core.settle(6)
        yield chunk


@rate_limited("usage")
def stream(request: HttpRequest) -> StreamingHttpResponse:
    return StreamingHttpResponse(_chunks())


@rate_limited("usage")
async def astream(request: HttpRequest) -> StreamingHttpResponse:
    return StreamingHttpResponse(_achunks())


urlpatterns = [path("stream", stream), path("astream", astream)]
