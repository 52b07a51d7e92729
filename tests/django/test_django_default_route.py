"""``routes["*"]`` and ``@exempt`` in Django (SPEC §5, issue 27): every routed view no
other entry and no decorator guards is charged to the default, DRF views included;
``@exempt`` views, DRF views naming their own id to ``SentinelThrottle`` (charged to it
only) and unrouted requests are not."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.test import AsyncClient, Client, override_settings
from django_harness import Configure

from tests.support.default_route import DEFAULT_ID, OWN_ID, default_route_config, policy_names


@pytest.fixture
def client(redis_url: str) -> Iterator[Client]:
    config = default_route_config(redis_url, **{"GET routed": OWN_ID})
    config["socket_timeout_ms"] = 1000
    with override_settings(SENTINEL=config, ROOT_URLCONF="djproject.default_urls"):
        yield Client()


def test_the_default_guards_every_undecorated_view_and_drf_views_too(client: Client) -> None:
    responses = [client.get("/plain"), client.get("/api"), client.get("/plain")]
    assert [r.status_code for r in responses] == [200, 200, 429]
    assert policy_names(responses[0].get("RateLimit-Policy")) == [DEFAULT_ID]
    assert policy_names(responses[1].get("RateLimit-Policy")) == [DEFAULT_ID]


async def test_an_async_view_under_the_default(redis_url: str, configure: Configure) -> None:
    configure(**default_route_config(redis_url))
    with override_settings(ROOT_URLCONF="djproject.default_urls"):
        client = AsyncClient()
        statuses = [(await client.get("/other")).status_code for _ in range(3)]
    assert statuses == [200, 200, 429]


def test_exempt_views_and_404s_are_never_charged(client: Client) -> None:
    for path in ("/health", "/quiet", "/quiet-api", "/nowhere"):
        responses = [client.get(path) for _ in range(4)]
        assert {r.status_code for r in responses} == {404 if path == "/nowhere" else 200}
        assert all(not r.has_header("RateLimit") for r in responses), path
    assert [client.get("/plain").status_code for _ in range(3)] == [200, 200, 429]


def test_a_decorated_throttled_or_routed_view_pays_for_its_own_id_only(client: Client) -> None:
    for path in ("/decorated", "/throttled", "/routed"):
        response = client.get(path)
        assert policy_names(response.get("RateLimit-Policy")) == [OWN_ID], path
    for _ in range(2):
        client.get("/plain")
    assert client.get("/plain").status_code == 429
    assert client.get("/throttled").status_code == 200
