"""The Django routes of `bench_flood.py` (see `_flood_apps.django_app`), imported by
Django once the settings are configured."""

from __future__ import annotations

import os

import redis
from django.http import HttpRequest, HttpResponse
from django.urls import path

from benchmarks._flood_apps import DJANGO_RATE, ONE

_client = redis.Redis.from_url(os.environ["FLOOD_REDIS"])
_sha = _client.script_load(ONE)


def bare(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


def evalsha(request: HttpRequest) -> HttpResponse:
    _client.evalsha(_sha, 0)
    return HttpResponse("ok")


def refused(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok", status=429)


if os.environ.get("FLOOD_KIND", "sentinel") == "sentinel":
    from sentinel_django import rate_limited

    limited = rate_limited("flood")(bare)
else:
    from django_ratelimit.decorators import ratelimit

    # block=True: a denial raises Ratelimited, which Django answers 403 by default
    limited = ratelimit(key="ip", rate=DJANGO_RATE, block=True)(bare)

urlpatterns = [
    path("limited", limited),
    path("bare", bare),
    path("evalsha", evalsha),
    path("refused", refused),
]
