"""The contract app's URL patterns on Django (``ROOT_URLCONF`` of the Django factory)."""

from __future__ import annotations

from collections.abc import Iterator

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.urls import path

import sentinel_core
from sentinel_core import Decision, DecisionReason
from sentinel_django import rate_limited
from tests.contract.harness import rendered, report_bad, report_midway

UNAVAILABLE = frozenset(
    {
        DecisionReason.FAIL_CLOSED,
        DecisionReason.CIRCUIT_OPEN,
        DecisionReason.REDIS_TIMEOUT,
        DecisionReason.REDIS_CONNECTION_ERROR,
        DecisionReason.REDIS_NOSCRIPT_RETRY,
    }
)


@rate_limited("small")
def decorated(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"ok": True})


@rate_limited("small")
def same(request: HttpRequest, item_id: int) -> JsonResponse:
    return JsonResponse({"item": item_id})


@rate_limited("small")
async def different(request: HttpRequest, item_id: int) -> JsonResponse:
    return JsonResponse({"item": item_id})


def routed(request: HttpRequest, item_id: int) -> JsonResponse:
    return JsonResponse({"item": item_id})


@rate_limited("device")
def login(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"ok": True})


@rate_limited("device")
def inner(request: HttpRequest, status: int) -> HttpResponse:
    return HttpResponse(status=status)


@rate_limited("failures")
def count(request: HttpRequest, status: int) -> HttpResponse:
    return HttpResponse(status=status)


@rate_limited("failures")
def fail(request: HttpRequest) -> HttpResponse:
    raise RuntimeError("the handler failed")


@rate_limited("failures")
def refuse(request: HttpRequest) -> HttpResponse:
    raise PermissionDenied


@rate_limited("slot")
def slot(request: HttpRequest, kind: int) -> HttpResponse:
    if kind == 1:
        raise RuntimeError("the handler failed")
    raise PermissionDenied


def stream(request: HttpRequest) -> StreamingHttpResponse:
    def chunks() -> Iterator[bytes]:
        yield from (b"a", b"b", b"c")

    return StreamingHttpResponse(chunks())


@rate_limited("usage")
async def usage(request: HttpRequest, units: int) -> JsonResponse:
    sentinel_core.settle(units)
    return JsonResponse({"units": units})


@rate_limited("usage")
def usage_sync(request: HttpRequest, units: int) -> JsonResponse:
    sentinel_core.settle(units)
    return JsonResponse({"units": units})


@rate_limited("usage")
def usage_stream(request: HttpRequest, units: int) -> StreamingHttpResponse:
    def chunks() -> Iterator[bytes]:
        for chunk in (b"a", b"b", b"c"):
            sentinel_core.settle(units)
            yield chunk

    return StreamingHttpResponse(chunks())


@rate_limited("usage")
async def usage_astream(request: HttpRequest, units: int) -> StreamingHttpResponse:
    def chunks() -> Iterator[bytes]:  # the test client is WSGI's: a sync body
        for chunk in (b"a", b"b", b"c"):
            sentinel_core.settle(units)
            yield chunk

    return StreamingHttpResponse(chunks())


@rate_limited("usage")
def usage_download(request: HttpRequest, units: int) -> StreamingHttpResponse:
    def chunks() -> Iterator[bytes]:
        for chunk in (b"a", b"b", b"c"):
            sentinel_core.settle(units)
            yield chunk

    response = StreamingHttpResponse(chunks())
    response["Content-Length"] = "3"
    return response


@rate_limited("usage")
def usage_raise(request: HttpRequest, units: int) -> HttpResponse:
    sentinel_core.settle(units)
    raise RuntimeError("the handler failed")


@rate_limited("usage.count")
def usage_count(request: HttpRequest, status: int) -> HttpResponse:
    sentinel_core.settle(7)
    return HttpResponse(status=status)


def report(request: HttpRequest, units: int) -> JsonResponse:
    sentinel_core.settle(units)
    return JsonResponse({"units": units})


def report_bad_(request: HttpRequest, kind: int) -> HttpResponse:
    report_bad(kind)
    raise AssertionError("settle accepted a bad value")


def report_midway_(request: HttpRequest, units: int) -> JsonResponse:
    report_midway(units)
    return JsonResponse({"units": units})


@rate_limited("user")
def user(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"ok": True})


def render_denial(request: HttpRequest, decision: Decision) -> JsonResponse:
    """``SENTINEL["denial_view"]`` (`harness.DENIAL_VIEW`)."""
    status = 503 if decision.reason in UNAVAILABLE else 429
    return JsonResponse(rendered(decision), status=status)


def open_(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"ok": True})


urlpatterns = [
    path("decorated", decorated),
    path("same/<int:item_id>", same),
    path("different/<int:item_id>", different),
    path("routed/<int:item_id>", routed),
    path("login", login),
    path("inner/<int:status>", inner),
    path("count/<int:status>", count),
    path("raise", fail),
    path("refuse", refuse),
    path("slot/<int:kind>", slot),
    path("stream", stream),
    path("usage/<int:units>", usage),
    path("usage-sync/<int:units>", usage_sync),
    path("usage-stream/<int:units>", usage_stream),
    path("usage-astream/<int:units>", usage_astream),
    path("usage-download/<int:units>", usage_download),
    path("usage-raise/<int:units>", usage_raise),
    path("usage-count/<int:status>", usage_count),
    path("report/<int:units>", report),
    path("report-bad/<int:kind>", report_bad_),
    path("report-midway/<int:units>", report_midway_),
    path("user", user),
    path("open", open_),
]
