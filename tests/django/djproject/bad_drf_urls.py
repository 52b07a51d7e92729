"""DRF views whose ``SentinelThrottle`` cannot work (sentinel.E006), beside throttled
views the check must leave alone."""

from django.urls import path
from rest_framework.response import Response
from rest_framework.throttling import AnonRateThrottle
from rest_framework.views import APIView
from rest_framework.viewsets import ViewSet

from sentinel_django.throttling import SentinelThrottle

from .drf_urls import Export, Nameless


class Typo(APIView):
    throttle_classes = (SentinelThrottle,)
    sentinel_endpoint = "pdftalk.ingets"

    def post(self, request: object) -> Response:
        raise AssertionError("must not run")  # pragma: no cover


class OwnThrottle(SentinelThrottle):
    """A project's subclass: still Sentinel's throttle."""


class TypoViewSet(ViewSet):
    throttle_classes = (OwnThrottle,)
    sentinel_endpoint = "reports.rendr"

    def list(self, request: object) -> Response:
        raise AssertionError("must not run")  # pragma: no cover


class DrfThrottled(APIView):
    throttle_classes = (AnonRateThrottle,)
    sentinel_endpoint = "not.sentinels.business"

    def get(self, request: object) -> Response:
        raise AssertionError("must not run")  # pragma: no cover


urlpatterns = [
    path("export", Export.as_view()),
    path("nameless", Nameless.as_view()),
    path("typo", Typo.as_view()),
    path("typo-again", Typo.as_view()),
    path("typo-viewset", TypoViewSet.as_view({"get": "list"})),
    path("drf-throttled", DrfThrottled.as_view()),
]
