"""Views for the ``routes["*"]`` tests: undecorated, ``@exempt``, decorated, routed, and
DRF views with and without ``SentinelThrottle``."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.urls import path
from django.views import View
from rest_framework.response import Response
from rest_framework.views import APIView

from sentinel_django import exempt, rate_limited
from sentinel_django.throttling import SentinelThrottle
from tests.support.default_route import OWN_ID


def plain(request: HttpRequest) -> HttpResponse:
    return HttpResponse("plain")


async def other(request: HttpRequest) -> HttpResponse:
    return HttpResponse("other")


@exempt
def health(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


@exempt
class Quiet(View):
    def get(self, request: HttpRequest) -> HttpResponse:
        return HttpResponse("quiet")


@rate_limited(OWN_ID)
def decorated(request: HttpRequest) -> HttpResponse:
    return HttpResponse("decorated")


def routed(request: HttpRequest) -> HttpResponse:
    return HttpResponse("routed")


class Api(APIView):
    def get(self, request: object) -> Response:
        return Response({"ok": True})


class Throttled(APIView):
    throttle_classes = (SentinelThrottle,)
    sentinel_endpoint = OWN_ID

    def get(self, request: object) -> Response:
        return Response({"ok": True})


@exempt
class QuietApi(APIView):
    def get(self, request: object) -> Response:
        return Response({"ok": True})


urlpatterns = [
    path("plain", plain),
    path("other", other),
    path("health", health),
    path("quiet", Quiet.as_view()),
    path("decorated", decorated),
    path("routed", routed),
    path("api", Api.as_view()),
    path("throttled", Throttled.as_view()),
    path("quiet-api", QuietApi.as_view()),
]
