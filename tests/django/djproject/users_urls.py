"""Views limited per user (``identity: "user"``): a session login, DRF token auth, an API
key, the middleware's ``routes``; and the denial views ``SENTINEL["denial_view"]`` names."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import path
from rest_framework.authentication import TokenAuthentication
from rest_framework.response import Response
from rest_framework.views import APIView

from sentinel_core import Decision
from sentinel_django import rate_limited
from sentinel_django.throttling import SentinelThrottle
from tests.support.users import USER_POLICY, api_key_user


def _who(request: Any) -> dict[str, str]:
    """The user's name (a Django or DRF request; DRF's no-token user is None here)."""
    user = request.user
    return {"user": user.get_username() if user is not None and user.is_authenticated else ""}


@rate_limited(USER_POLICY)
def search(request: HttpRequest) -> JsonResponse:
    return JsonResponse(_who(request))


@rate_limited(USER_POLICY)
async def async_search(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"ok": True})


def routed(request: HttpRequest) -> JsonResponse:
    """Guarded by ``routes`` only (the middleware)."""
    return JsonResponse(_who(request))


class TokenSearch(APIView):
    authentication_classes = (TokenAuthentication,)
    permission_classes = ()
    throttle_classes = (SentinelThrottle,)
    sentinel_endpoint = USER_POLICY

    def get(self, request: Any) -> Response:
        return Response(_who(request))


class TokenRouted(APIView):
    """Guarded by ``routes`` only: the middleware admits it before DRF authenticates."""

    authentication_classes = (TokenAuthentication,)
    permission_classes = ()

    def get(self, request: Any) -> Response:
        return Response(_who(request))


def api_key(request: HttpRequest) -> str | None:
    """``SENTINEL["identify"]`` for an app whose clients send an API key."""
    return api_key_user(request.headers)


def too_many(request: HttpRequest, decision: Decision) -> HttpResponse:
    """``SENTINEL["denial_view"]``: the app's own page for a denial."""
    return HttpResponse(
        f"<h1>{decision.endpoint_id}: {decision.reason}</h1>",
        status=429 if decision.reason in ("rate_limited", "emergency_local_limit") else 503,
    )


async def async_too_many(request: HttpRequest, decision: Decision) -> HttpResponse:
    return HttpResponse(f"async {decision.reason}", status=429, content_type="text/plain")


def not_a_response(request: HttpRequest, decision: Decision) -> str:
    return "oops"


NOT_CALLABLE = "a string"

urlpatterns = [
    path("search", search),
    path("async-search", async_search),
    path("routed", routed),
    path("token-search", TokenSearch.as_view()),
    path("token-routed", TokenRouted.as_view()),
]
