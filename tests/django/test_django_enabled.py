"""``enabled = false`` in Django (SPEC §2): the middleware, the decorators (sync and async
views) and the DRF throttle pass every request through, with no store ever contacted.
The contract suite shows the same of every adapter's routes; here, Django's own idioms."""

from __future__ import annotations

from django.test import Client, override_settings
from django_harness import Configure, Http

from sentinel_core import BreakerState
from sentinel_django import conf
from tests.support.adapter_config import bearer

AUTH = {"Authorization": bearer("acme", expires_in=3600)}


def test_views_of_every_kind_pass_through(
    http: Http, configure: Configure, dead_redis_url: str
) -> None:
    configure(redis_url=dead_redis_url, enabled=False)

    responses = [
        http.post(f"{http.prefix}/{view}", **AUTH)
        for view in ("ingest", "cbv-class", "cbv-method", "login", "login")
        for _ in range(4)
    ]

    assert [response.status_code for response in responses] == [200] * 20
    for response in responses:
        assert not any(name.lower().startswith("ratelimit") for name in response.headers)
        assert not response.cookies
    assert conf.get_sentinel().breaker_state is BreakerState.CLOSED  # no call ever failed


def test_the_drf_throttle_passes_through(configure: Configure, dead_redis_url: str) -> None:
    configure(redis_url=dead_redis_url, enabled=False, routes={})
    with override_settings(ROOT_URLCONF="djproject.drf_urls"):
        statuses = [Client().post("/export", headers=AUTH).status_code for _ in range(5)]

    assert statuses == [200] * 5
