"""Views for the completion step: streamed bodies (sync and async, whole, failing or
abandoned) and a class-based view whose ``get`` alone is decorated."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.urls import path
from django.views import View

from sentinel_django import rate_limited


def _chunks(fail: bool) -> Iterator[bytes]:
    yield b"a"
    if fail:
        raise RuntimeError("the stream failed")
    yield b"b"


async def _achunks(fail: bool) -> AsyncIterator[bytes]:
    yield b"a"
    if fail:
        raise RuntimeError("the stream failed")
    yield b"b"


@rate_limited("slots")
def stream(request: HttpRequest) -> StreamingHttpResponse:
    return StreamingHttpResponse(_chunks("fail" in request.GET))


@rate_limited("slots")
async def astream(request: HttpRequest) -> StreamingHttpResponse:
    return StreamingHttpResponse(_achunks("fail" in request.GET))


@rate_limited("slots")
def plain(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


@rate_limited("slots")
def boom(request: HttpRequest) -> HttpResponse:
    raise RuntimeError("the view failed")


@rate_limited("slots")
def forbidden(request: HttpRequest) -> HttpResponse:
    raise PermissionDenied


class Report(View):
    @rate_limited("slots")
    def get(self, request: HttpRequest) -> HttpResponse:
        return HttpResponse("report")


urlpatterns = [
    path("stream", stream),
    path("astream", astream),
    path("plain", plain),
    path("boom", boom),
    path("forbidden", forbidden),
    path("report", Report.as_view()),
]
