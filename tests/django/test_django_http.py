"""SPEC §4, row by row, through Django: sync views with ``Client``, async views with
``AsyncClient`` (the ``http`` fixture runs each test both ways), on a real redis-server."""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import jwt
import pytest
from django_harness import Configure, Http

from sentinel_core.testing import ratelimit_headers
from tests.support.adapter_config import COOKIE_SECRET, JWT_KEY, bearer
from tests.support.redis_admin import RedisAdmin

QUOTA_EXCEEDED = "https://iana.org/assignments/http-problem-types#quota-exceeded"
REDUCED_CAPACITY = "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"


def _problem(response: Any) -> dict[str, Any]:
    assert response["Content-Type"] == "application/problem+json"
    body: dict[str, Any] = json.loads(response.content)
    assert body["status"] == response.status_code
    return body


def _remaining(response: Any) -> int:
    """The ``r`` parameter of the ``RateLimit`` header's one member."""
    (state,) = ratelimit_headers(response.headers)["state"].values()
    return int(state["r"])


def _dbsize(url: str) -> int:
    client = RedisAdmin(url)
    try:
        return client.dbsize()
    finally:
        client.close()


def test_allowed_request_reaches_the_view_with_ratelimit_headers(
    http: Http, configure: Configure
) -> None:
    configure()
    auth = bearer("acme")
    first = http.post(f"{http.prefix}/ingest", Authorization=auth)
    second = http.post(f"{http.prefix}/ingest", Authorization=auth)

    assert first.status_code == 200
    assert json.loads(first.content)["view"] == {"sync": "function", "async": "async"}[http.flavor]
    assert first["RateLimit-Policy"].startswith('"pdftalk.ingest";q=3;w=60')
    assert first["RateLimit"].startswith('"pdftalk.ingest";')
    assert _remaining(first) == 2
    assert _remaining(second) == 1


@pytest.mark.parametrize(
    ("endpoint", "allowed", "longest_wait"),
    # token bucket, 1/minute refill: one token within 60 s; two-window sliding counter,
    # 3/minute: the current window's weight must fade in the next window, under 120 s.
    [("tailor", 3, 60), ("ingest", 3, 120)],
    ids=["token_bucket", "sliding_window"],
)
def test_rate_limited_is_429_with_integer_retry_after_and_problem_json(
    http: Http, configure: Configure, endpoint: str, allowed: int, longest_wait: int
) -> None:
    configure()
    auth = bearer("acme")
    statuses = [
        http.post(f"{http.prefix}/{endpoint}", Authorization=auth).status_code
        for _ in range(allowed)
    ]
    denied = http.post(f"{http.prefix}/{endpoint}", Authorization=auth)

    assert statuses == [200] * allowed
    assert denied.status_code == 429
    retry_after = denied["Retry-After"]
    assert retry_after.isdigit()
    assert 1 <= int(retry_after) <= longest_wait
    assert "RateLimit" in denied
    assert "RateLimit-Policy" in denied
    body = _problem(denied)
    assert body["type"] == QUOTA_EXCEEDED
    assert body["detail"] == "rate limit exceeded"
    assert "Set-Cookie" not in denied


def test_fail_closed_policy_answers_503_when_redis_is_down(
    http: Http, configure: Configure, dead_redis_url: str
) -> None:
    configure(redis_url=dead_redis_url)
    response = http.post(f"{http.prefix}/ingest", Authorization=bearer("acme"))

    assert response.status_code == 503
    body = _problem(response)
    assert body["type"] == REDUCED_CAPACITY
    assert body["detail"] == "rate limiter unavailable"


def test_fail_closed_503_carries_retry_after_once_the_breaker_opens(
    http: Http, configure: Configure, dead_redis_url: str
) -> None:
    configure(redis_url=dead_redis_url)  # failure_threshold 3, open_seconds 30
    auth = bearer("acme")
    responses = [http.post(f"{http.prefix}/ingest", Authorization=auth) for _ in range(4)]

    assert [r.status_code for r in responses] == [503] * 4
    assert responses[-1]["Retry-After"].isdigit()
    assert 1 <= int(responses[-1]["Retry-After"]) <= 30


def test_fail_open_policy_is_capped_by_the_emergency_limiter_when_redis_is_down(
    http: Http, configure: Configure, dead_redis_url: str
) -> None:
    configure(redis_url=dead_redis_url)  # tailor: fallback_rate 2/second
    auth = bearer("acme")
    responses = [http.post(f"{http.prefix}/tailor", Authorization=auth) for _ in range(3)]

    assert [r.status_code for r in responses] == [200, 200, 429]
    assert int(responses[2]["Retry-After"]) >= 1
    assert _problem(responses[2])["type"] == QUOTA_EXCEEDED


def _token(**claims: Any) -> str:
    payload = {"sub": "acme", "exp": int(time.time()) + 300, **claims}
    return jwt.encode(payload, JWT_KEY, algorithm="HS256")


BAD_AUTHORIZATION = {
    "missing": None,
    "empty": "",
    "not_bearer": "Basic YWNtZTpzZWNyZXQ=",
    "malformed": "Bearer not.a.jwt",
    "garbage_bytes": "Bearer \u00ff\u00fe",
    "expired": "Bearer " + _token(exp=int(time.time()) - 60),
    "wrong_key": bearer("acme", key="another-key-0123456789abcdef-0123456789ab"),
    "no_sub": "Bearer " + jwt.encode({"exp": int(time.time()) + 300}, JWT_KEY, "HS256"),
    "alg_none": "Bearer " + jwt.encode({"sub": "acme", "exp": 2**31}, None, algorithm="none"),
}


@pytest.mark.security
@pytest.mark.parametrize("case", list(BAD_AUTHORIZATION))
def test_bad_bearer_token_is_401_before_any_redis_call(
    http: Http, configure: Configure, redis_url: str, case: str
) -> None:
    configure()
    value = BAD_AUTHORIZATION[case]
    headers = {} if value is None else {"Authorization": value}
    response = http.post(f"{http.prefix}/ingest", **headers)

    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert _problem(response)["title"] == "Unauthorized"
    assert _dbsize(redis_url) == 0


def test_tenants_have_separate_buckets(http: Http, configure: Configure) -> None:
    configure()
    for _ in range(3):
        assert http.post(f"{http.prefix}/ingest", Authorization=bearer("acme")).status_code == 200
    assert http.post(f"{http.prefix}/ingest", Authorization=bearer("acme")).status_code == 429

    assert http.post(f"{http.prefix}/ingest", Authorization=bearer("globex")).status_code == 200


@pytest.mark.security
def test_x_tenant_id_is_ignored_the_jwt_subject_decides(http: Http, configure: Configure) -> None:
    configure()
    auth = bearer("acme")
    for index in range(3):
        response = http.post(
            f"{http.prefix}/ingest", Authorization=auth, **{"X-Tenant-ID": f"tenant-{index}"}
        )
        assert response.status_code == 200
    spoofed = http.post(f"{http.prefix}/ingest", Authorization=auth, **{"X-Tenant-ID": "other"})

    assert spoofed.status_code == 429


@pytest.mark.security
def test_x_forwarded_for_is_ignored_the_peer_address_decides(
    http: Http, configure: Configure
) -> None:
    configure()
    statuses = []
    for index in range(3):
        http.cookies.clear()  # a fresh device each time: only the IP bucket is shared
        response = http.post(
            f"{http.prefix}/login", peer="203.0.113.7", **{"X-Forwarded-For": f"198.51.100.{index}"}
        )
        statuses.append(response.status_code)
    other_peer = http.post(f"{http.prefix}/login", peer="192.0.2.99")

    assert statuses == [200, 200, 429]  # auth.login: 2/minute per IP, whatever XFF says
    assert other_peer.status_code == 200


def test_anonymous_cookie_is_minted_on_allowed_responses_only(
    http: Http, configure: Configure
) -> None:
    configure()
    first = http.post(f"{http.prefix}/login")
    cookie = first.cookies["sentinel_device"]
    second = http.post(f"{http.prefix}/login")  # the client sends the cookie back
    denied = http.post(f"{http.prefix}/login")

    assert first.status_code == 200
    assert cookie["httponly"] is True
    assert cookie["samesite"] == "Lax"
    assert not cookie["secure"]  # "secure": False in the test configuration
    assert int(cookie["max-age"]) == 31_536_000
    assert second.status_code == 200
    assert "sentinel_device" not in second.cookies  # a valid cookie is not re-issued
    assert denied.status_code == 429
    assert "sentinel_device" not in denied.cookies


def test_anonymous_cookie_is_secure_when_configured(http: Http, configure: Configure) -> None:
    configure(anonymous={"cookie_secret": COOKIE_SECRET, "secure": True})
    response = http.post(f"{http.prefix}/login")

    assert response.cookies["sentinel_device"]["secure"] is True


@pytest.mark.security
def test_forged_device_cookie_is_treated_as_absent(http: Http, configure: Configure) -> None:
    configure()
    http.cookies["sentinel_device"] = "forged.value"
    response = http.post(f"{http.prefix}/login")

    assert response.status_code == 200
    assert response.cookies["sentinel_device"].value != "forged.value"


def test_django_does_not_log_each_denial_but_keeps_every_other_response(
    http: Http, configure: Configure, caplog: pytest.LogCaptureFixture
) -> None:
    """Django logs every 4xx on ``django.request``; for Sentinel's denials Sentinel's own
    once-a-second record stands instead, so a flood of denials does not flood the logs."""
    configure()
    auth = bearer("acme")
    caplog.set_level(logging.WARNING)
    responses = [http.post(f"{http.prefix}/ingest", Authorization=auth) for _ in range(6)]
    missing = http.get(f"{http.prefix}/no-such-page")
    # No decision, no Sentinel record: Django's record of a 401 stays.
    unauthenticated = http.post(f"{http.prefix}/ingest")

    assert [r.status_code for r in responses] == [200, 200, 200, 429, 429, 429]
    assert missing.status_code == 404
    assert unauthenticated.status_code == 401
    django_records = [r for r in caplog.records if r.name == "django.request"]
    assert [r.status_code for r in django_records] == [404, 401]  # type: ignore[attr-defined]
    sentinel_records = [r for r in caplog.records if r.name == "sentinel"]
    assert len(sentinel_records) == 1  # the other two are counted into the next record


def test_the_request_log_filter_is_installed_once() -> None:
    from sentinel_django import request_log

    request_log.install()
    request_log.install()
    installed = logging.getLogger("django.request").filters
    assert sum(isinstance(f, request_log.DeniedRequestFilter) for f in installed) == 1
