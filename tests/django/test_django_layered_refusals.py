"""A request that one guard admitted and a later one refuses (a DRF ``SentinelThrottle``
or a decorator the middleware could not see ahead, after the middleware's ``routes``
entry; the inner of two stacked decorators): the refusal carries the refusing policy's
fields alone, as a refusal in one admission does (the core's rule). The admitted
policy's ``t`` could be shorter than the refusal's Retry-After, and a client that
waits ``t`` must not be refused again (SPEC §4)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import override_settings
from django_harness import Configure, Http

from sentinel_django import conf
from tests.support.adapter_config import bearer, spec_config

AUTH = bearer("acme", expires_in=3600)
BULK = {"algorithm": "token_bucket", "rate": "100/minute", "fail_mode": "closed"}
"""The first guard's policy: it admits every request of a test."""
VIEWS = ("export", "relay", "stacked")


def _policies(**extra: Any) -> dict[str, Any]:
    return {**spec_config("memory://")["policies"], **extra}


def _path(http: Http, view: str) -> str:
    """The view's path: the async twin for the async client, DRF's view for both."""
    return f"/a{view}" if http.flavor == "async" and view != "export" else f"/{view}"


@pytest.fixture
def layered(configure: Configure) -> Iterator[None]:
    configure(
        policies=_policies(**{"bulk.api": BULK}),
        routes={f"POST {name}": "bulk.api" for name in ("export", "relay", "arelay")},
    )
    with override_settings(ROOT_URLCONF="djproject.layered_urls"):
        yield


@pytest.mark.usefixtures("layered")
@pytest.mark.parametrize("view", VIEWS)
def test_a_later_guards_refusal_carries_the_refusing_policys_fields_only(
    http: Http, view: str
) -> None:
    middleware = [] if view == "stacked" else ["sentinel_django.middleware.SentinelMiddleware"]
    with override_settings(MIDDLEWARE=middleware):
        responses = [http.post(_path(http, view), Authorization=AUTH) for _ in range(4)]

    assert [r.status_code for r in responses] == [200, 200, 200, 429]
    allowed, refused = responses[0], responses[3]
    for name in ("RateLimit-Policy", "RateLimit"):
        assert '"bulk.api"' in allowed[name]
        assert '"pdftalk.ingest"' in allowed[name]
        assert refused[name].startswith('"pdftalk.ingest";')
        assert '"bulk.api"' not in refused[name]
    t = int(refused["RateLimit"].split(";t=")[1].split(";")[0])
    assert t >= int(refused["Retry-After"]) >= 1
    assert refused["Content-Type"] == "application/problem+json"
    assert json.loads(refused.content)["status"] == 429


def test_a_throttles_401_under_an_admitting_middleware_has_no_ratelimit_fields(
    configure: Configure, http: Http
) -> None:
    anonymous = {**BULK, "identity": "anonymous"}
    configure(policies=_policies(**{"open.anon": anonymous}), routes={"POST export": "open.anon"})
    with override_settings(ROOT_URLCONF="djproject.layered_urls"):
        refused = http.post("/export")  # no token: the throttle's tenant policy refuses

    assert refused.status_code == 401
    assert refused["WWW-Authenticate"].startswith("Bearer")
    assert "RateLimit" not in refused
    assert "RateLimit-Policy" not in refused
    assert "Set-Cookie" not in refused


def test_a_throttles_503_under_a_failing_open_middleware_has_no_ratelimit_fields(
    configure: Configure, dead_redis_url: str, http: Http
) -> None:
    """Redis is down: the route's fail-open policy admits (emergency limiter), the
    throttle's fail-closed one refuses, with no quota to describe (SPEC §4)."""
    configure(redis_url=dead_redis_url, routes={"POST export": "resumint.tailor"})
    with override_settings(ROOT_URLCONF="djproject.layered_urls"):
        refused = http.post("/export", Authorization=AUTH)

    assert refused.status_code == 503
    assert json.loads(refused.content)["detail"] == "rate limiter unavailable"
    assert "RateLimit" not in refused


@pytest.mark.parametrize(
    "first",
    [{**BULK, "settle": True}, {**BULK, "count": ["4xx"]}],
    ids=["settle-reservation", "count-4xx"],
)
@pytest.mark.parametrize("view", VIEWS)
def test_a_later_guards_refusal_withdraws_what_the_first_admitted(
    configure: Configure, http: Http, first: dict[str, Any], view: str
) -> None:
    """The view never ran: the first guard's reservation is refunded and its ``count``
    policy counts nothing, as when one admission refuses (the refusal's 429 is
    Sentinel's own, not the view's)."""
    configure(
        policies=_policies(**{"bulk.api": first}),
        routes={f"POST {name}": "bulk.api" for name in ("export", "relay", "arelay")},
    )
    middleware = [] if view == "stacked" else ["sentinel_django.middleware.SentinelMiddleware"]
    with (
        override_settings(ROOT_URLCONF="djproject.layered_urls"),
        override_settings(MIDDLEWARE=middleware),
    ):
        statuses = [http.post(_path(http, view), Authorization=AUTH).status_code for _ in range(4)]

    assert statuses == [200, 200, 200, 429]
    charged = 3 if "settle" in first else 0  # the admitted requests' reservations
    # What the next request would leave: one less than the bucket holds.
    assert conf.runtime().sentinel.peek("bulk.api", "acme").remaining == 100 - charged - 1
