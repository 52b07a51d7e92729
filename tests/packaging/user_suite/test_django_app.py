"""A user's Django project and its tests, as docs/testing.md shows them (settings
configured in code here; a project has them in settings.py)."""

import django
import pytest
from django.conf import settings
from django.http import JsonResponse
from django.test import Client, override_settings
from django.urls import path

settings.configure(
    ROOT_URLCONF=__name__,
    ALLOWED_HOSTS=["testserver"],
    INSTALLED_APPS=["sentinel_django"],
    MIDDLEWARE=["sentinel_django.middleware.SentinelMiddleware"],
    SENTINEL={
        "redis_url": "memory://",
        "anonymous": {"cookie_secret": "a-test-secret-of-at-least-32-bytes", "secure": False},
        "policies": {
            "reports.export": {
                "algorithm": "token_bucket",
                "rate": "1/hour",
                "burst": 2,
                "identity": "anonymous",
                "fail_mode": "closed",
            }
        },
        "routes": {"GET reports/export": "reports.export"},
    },
)
django.setup()

from sentinel_core.testing import ratelimit_headers  # noqa: E402


def export(request):
    return JsonResponse({"rows": []})


urlpatterns = [path("reports/export", export)]


@pytest.fixture(autouse=True)
def fresh_limits(sentinel_reset):
    """Every test starts with full limits."""


def test_export_is_limited_and_refills(sentinel_clock):
    client = Client()
    assert [client.get("/reports/export").status_code for _ in range(3)] == [200, 200, 429]

    sentinel_clock.advance(3600)
    response = client.get("/reports/export")
    assert response.status_code == 200
    assert ratelimit_headers(response.headers)["state"]["reports.export"]["r"] == 0


def test_limiting_switched_off():
    switched_off = {**settings.SENTINEL, "enabled": False, "redis_url": "redis://127.0.0.1:1/0"}
    with override_settings(SENTINEL=switched_off):
        responses = [Client().get("/reports/export") for _ in range(5)]
    assert [response.status_code for response in responses] == [200] * 5
    assert not any(response.has_header("RateLimit") for response in responses)
