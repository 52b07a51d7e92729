"""Views refused by a guard that runs after another admitted the request: a DRF
``SentinelThrottle`` and a ``@rate_limited`` view that another view calls (the
middleware cannot see that decorator ahead) after the middleware's ``routes`` entry,
and the inner one of two stacked decorators without the middleware."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.urls import path
from rest_framework.response import Response
from rest_framework.views import APIView

from sentinel_django import rate_limited
from sentinel_django.throttling import SentinelThrottle

from . import views


class Export(APIView):
    throttle_classes = (SentinelThrottle,)
    sentinel_endpoint = "pdftalk.ingest"

    def post(self, request: object) -> Response:
        return Response({"ok": True})


def relay(request: HttpRequest) -> HttpResponse:
    return views.ingest(request)


async def arelay(request: HttpRequest) -> HttpResponse:
    return await views.aingest(request)


@rate_limited("bulk.api")
@rate_limited("pdftalk.ingest")
def stacked(request: HttpRequest) -> HttpResponse:
    return HttpResponse("stacked")


@rate_limited("bulk.api")
@rate_limited("pdftalk.ingest")
async def astacked(request: HttpRequest) -> HttpResponse:
    return HttpResponse("stacked")


urlpatterns = [
    path("export", Export.as_view()),
    path("relay", relay),
    path("arelay", arelay),
    path("stacked", stacked),
    path("astacked", astacked),
]
