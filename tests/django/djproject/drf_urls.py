"""DRF views throttled by ``SentinelThrottle``, and the objects the settings name."""

from __future__ import annotations

from typing import Any

from django.urls import path
from prometheus_client import CollectorRegistry
from rest_framework.response import Response
from rest_framework.views import APIView

from sentinel_core import Decision, hookimpl
from sentinel_django.throttling import SentinelThrottle


class Export(APIView):
    throttle_classes = (SentinelThrottle,)
    sentinel_endpoint = "pdftalk.ingest"

    def post(self, request: object) -> Response:
        return Response({"ok": True})


class Nameless(APIView):
    throttle_classes = (SentinelThrottle,)

    def post(self, request: object) -> Response:
        raise AssertionError("must not run")  # pragma: no cover


class Decisions:
    """A plugin keeping every decision's endpoint id."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    @hookimpl
    def sentinel_decision(self, decision: Decision, request: Any) -> None:
        self.seen.append(decision.endpoint_id)


REGISTRY = CollectorRegistry()
PLUGIN = Decisions()

urlpatterns = [path("export", Export.as_view()), path("nameless", Nameless.as_view())]
