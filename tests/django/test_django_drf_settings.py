"""The DRF throttle idiom (``SentinelThrottle``) and the settings that name the metrics
registry and the plugins."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import Client, override_settings
from django_harness import Configure
from djproject import drf_urls
from prometheus_client import CollectorRegistry

from sentinel_django import conf
from tests.support.adapter_config import bearer

AUTH = {"Authorization": bearer("acme", expires_in=3600)}
QUOTA_EXCEEDED = "https://iana.org/assignments/http-problem-types#quota-exceeded"


@pytest.fixture
def drf(configure: Configure) -> Iterator[None]:
    configure(routes={})
    with override_settings(ROOT_URLCONF="djproject.drf_urls"):
        yield


@pytest.mark.usefixtures("drf")
def test_the_throttle_limits_a_view_with_sentinels_answer() -> None:
    client = Client()

    responses = [client.post("/export", headers=AUTH) for _ in range(4)]

    assert [r.status_code for r in responses] == [200, 200, 200, 429]
    assert responses[0]["RateLimit"].startswith('"pdftalk.ingest";r=2;')
    denied = responses[-1]
    assert denied["Content-Type"] == "application/problem+json"
    assert json.loads(denied.content)["type"] == QUOTA_EXCEEDED
    assert int(denied["Retry-After"]) >= 1


def test_a_route_and_the_throttle_naming_one_id_charge_it_once(configure: Configure) -> None:
    configure(routes={"POST export": "pdftalk.ingest"})
    with override_settings(ROOT_URLCONF="djproject.drf_urls"):
        response = Client().post("/export", headers=AUTH)

    assert response["RateLimit"].startswith('"pdftalk.ingest";r=2;')


def test_a_route_and_the_throttle_naming_two_ids_charge_both(configure: Configure) -> None:
    """The middleware admits the route's id, the throttle its own on the same request."""
    configure(routes={"POST export": "resumint.tailor"})
    with override_settings(ROOT_URLCONF="djproject.drf_urls"):
        responses = [Client().post("/export", headers=AUTH) for _ in range(2)]

    assert [r.status_code for r in responses] == [200, 200]
    assert responses[0]["RateLimit"].startswith('"resumint.tailor";r=2;')
    assert '"pdftalk.ingest";r=2;' in responses[0]["RateLimit"]
    assert '"pdftalk.ingest";r=1;' in responses[1]["RateLimit"]


@pytest.mark.usefixtures("drf")
def test_a_throttled_view_without_sentinel_endpoint_is_a_configuration_error() -> None:
    with pytest.raises(ImproperlyConfigured, match="sentinel_endpoint"):
        Client().post("/nameless", headers=AUTH)


@pytest.mark.usefixtures("drf")
def test_the_throttle_without_the_middleware_is_a_configuration_error() -> None:
    with override_settings(MIDDLEWARE=[]), pytest.raises(ImproperlyConfigured, match="Middleware"):
        Client().post("/export", headers=AUTH)


@pytest.mark.usefixtures("drf")
def test_the_registry_and_plugins_settings_take_objects_or_dotted_paths() -> None:
    registry = CollectorRegistry()
    with override_settings(
        SENTINEL_METRICS_REGISTRY=registry, SENTINEL_PLUGINS=["djproject.drf_urls.PLUGIN"]
    ):
        Client().post("/export", headers=AUTH)
        assert conf.get_sentinel().registry is registry
    with override_settings(SENTINEL_METRICS_REGISTRY="djproject.drf_urls.REGISTRY"):
        assert conf.get_sentinel().registry is drf_urls.REGISTRY

    assert drf_urls.PLUGIN.seen[-1] == "pdftalk.ingest"
    total = registry.get_sample_value(
        "sentinel_decisions_total",
        {"endpoint_id": "pdftalk.ingest", "decision_reason": "allowed", "allowed": "true"},
    )
    assert total == 1


@pytest.mark.usefixtures("drf")
def test_a_dotted_path_that_does_not_import_names_its_setting() -> None:
    with (
        override_settings(SENTINEL_PLUGINS=["djproject.nowhere.PLUGIN"]),
        pytest.raises(ImproperlyConfigured, match=r"settings\.SENTINEL_PLUGINS"),
    ):
        conf.get_sentinel()


def test_a_store_failure_through_the_throttle_is_sentinels_503(
    configure: Configure, dead_redis_url: str
) -> None:
    configure(routes={}, redis_url=dead_redis_url)
    with override_settings(ROOT_URLCONF="djproject.drf_urls"):
        response = Client().post("/export", headers=AUTH)

    assert response.status_code == 503
    assert json.loads(response.content)["detail"] == "rate limiter unavailable"
    assert "Retry-After" not in response
