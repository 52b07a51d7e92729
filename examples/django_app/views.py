"""The example's views: an async function view, a class-based view, and an undecorated
view that the middleware guards through ``SENTINEL["routes"]``."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views import View

from sentinel_django import rate_limited


@rate_limited("resumint.tailor")
async def tailor(request: HttpRequest) -> HttpResponse:
    """Tenant token bucket, fail-open: the async Redis client decides, on the event loop."""
    return JsonResponse({"tailored": True})


@rate_limited("pdftalk.ingest")
class Ingest(View):
    """Tenant sliding window, fail-closed: every handler of the class is guarded."""

    def post(self, request: HttpRequest) -> HttpResponse:
        return JsonResponse({"ingested": True}, status=202)


def login(request: HttpRequest) -> HttpResponse:
    """Anonymous (device cookie AND client IP): guarded by ``routes``, not a decorator."""
    return JsonResponse({"logged_in": False, "detail": "demo only"})


def health(request: HttpRequest) -> HttpResponse:
    """Not rate limited."""
    return JsonResponse({"status": "ok"})
