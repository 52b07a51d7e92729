"""SPEC §4 through the Flask extension: every row of the table, on a real redis-server."""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import jwt
import pytest
import redis
from flask import Flask
from flask.testing import FlaskClient

from sentinel_core.resilience._emergency import EmergencyLimiter
from sentinel_core.testing import ratelimit_headers
from sentinel_flask import rate_limited
from tests.flask.apps import MakeApp
from tests.support.adapter_config import JWT_KEY, bearer, spec_config

QUOTA_EXCEEDED = "https://iana.org/assignments/http-problem-types#quota-exceeded"
REDUCED_CAPACITY = "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
PROBLEM_JSON = "application/problem+json"
IN_FIVE_MINUTES = int(time.time()) + 300


def post(client: FlaskClient, path: str, tenant: str | None = "tenant-a", **kwargs: Any) -> Any:
    headers = dict(kwargs.pop("headers", {}))
    if tenant is not None:
        headers["Authorization"] = bearer(tenant)
    return client.post(path, headers=headers, **kwargs)


def problem(response: Any) -> dict[str, Any]:
    assert response.headers["Content-Type"] == PROBLEM_JSON
    body: dict[str, Any] = json.loads(response.data)
    assert body["status"] == response.status_code
    return body


def network_capacity(app: Flask, endpoint_id: str) -> int:
    """How many requests all the devices behind one address share on an anonymous policy."""
    policy = app.extensions["sentinel"].config.policies[endpoint_id]
    return int(getattr(policy, "network_burst", None) or policy.burst)


def fresh_login(app: Flask, peer: str, headers: dict[str, str] | None = None) -> Any:
    """``POST /auth/login`` from ``peer`` on a new client: a new device, no cookie."""
    return app.test_client().post(
        "/auth/login", environ_base={"REMOTE_ADDR": peer}, headers=headers
    )


def assert_retry_after(response: Any, *, at_most: int) -> int:
    value = response.headers["Retry-After"]
    assert value.isdigit(), value
    seconds = int(value)
    assert 1 <= seconds <= at_most
    return seconds


def test_allowed_response_is_the_views_with_ratelimit_headers(
    make_app: MakeApp, redis_url: str
) -> None:
    client = make_app(spec_config(redis_url)).test_client()

    remaining = []
    for _ in range(3):
        response = post(client, "/v1/tailor")
        assert response.status_code == 200
        assert response.json == {"view": "tailor"}
        assert response.headers["Content-Type"] == "application/json"
        fields = ratelimit_headers(response.headers)
        ((name, policy),) = fields["policy"].items()
        assert (name, policy["q"], policy["w"]) == ("resumint.tailor", 3, 180)
        assert list(fields["state"]) == ["resumint.tailor"]
        remaining.append(fields["state"]["resumint.tailor"]["r"])
    assert remaining == [2, 1, 0]


def test_token_bucket_denial_is_429_with_integer_retry_after_and_problem_json(
    make_app: MakeApp, redis_url: str
) -> None:
    client = make_app(spec_config(redis_url)).test_client()
    for _ in range(3):
        assert post(client, "/v1/tailor").status_code == 200

    response = post(client, "/v1/tailor")

    assert response.status_code == 429
    # 1/minute refill: the next token is at most a minute away.
    assert_retry_after(response, at_most=60)
    assert ratelimit_headers(response.headers)["state"]["resumint.tailor"]["r"] == 0
    body = problem(response)
    assert body["type"] == QUOTA_EXCEEDED
    assert body["detail"] == "rate limit exceeded"
    assert body["title"]


def test_sliding_window_denial_is_429_with_integer_retry_after_and_problem_json(
    make_app: MakeApp, redis_url: str
) -> None:
    client = make_app(spec_config(redis_url)).test_client()
    for _ in range(3):
        assert post(client, "/v1/ingest").status_code == 200

    response = post(client, "/v1/ingest")

    assert response.status_code == 429
    # The window slides: the previous minute's weight may hold past this one's end.
    assert_retry_after(response, at_most=120)
    assert "RateLimit-Policy" in response.headers
    body = problem(response)
    assert (body["type"], body["detail"]) == (QUOTA_EXCEEDED, "rate limit exceeded")


def test_denied_request_does_not_run_the_view(make_app: MakeApp, redis_url: str) -> None:
    calls = []
    app = make_app(spec_config(redis_url))

    @app.post("/v1/counted")
    @rate_limited("pdftalk.ingest")
    def counted() -> str:
        calls.append(1)
        return "ok"

    client = app.test_client()
    statuses = [post(client, "/v1/counted").status_code for _ in range(5)]

    assert statuses == [200, 200, 200, 429, 429]
    assert len(calls) == 3


def test_fail_closed_policy_on_a_dead_redis_is_503_then_retry_after_once_the_breaker_opens(
    make_app: MakeApp, dead_redis_url: str
) -> None:
    client = make_app(spec_config(dead_redis_url)).test_client()

    first = post(client, "/v1/ingest")
    assert first.status_code == 503
    assert "Retry-After" not in first.headers  # the breaker is still closed
    body = problem(first)
    assert (body["type"], body["detail"]) == (REDUCED_CAPACITY, "rate limiter unavailable")

    for _ in range(3):  # failure_threshold is 3
        post(client, "/v1/ingest")
    quarantined = post(client, "/v1/ingest")
    assert quarantined.status_code == 503
    assert_retry_after(quarantined, at_most=30)  # open_seconds is 30
    assert problem(quarantined)["type"] == REDUCED_CAPACITY


def test_fail_open_policy_on_a_dead_redis_is_capped_by_the_emergency_limiter(
    make_app: MakeApp, dead_redis_url: str
) -> None:
    app = make_app(spec_config(dead_redis_url))
    now = [1_000_000_000_000]
    # Freeze the emergency limiter's clock: the cap is exact, not a race with time.
    app.extensions["sentinel"]._engine.emergency = EmergencyLimiter(clock_ns=lambda: now[0])
    client = app.test_client()

    statuses = [post(client, "/v1/tailor", tenant=f"tenant-{i}").status_code for i in range(8)]
    # fallback_rate 2/second: one second of it, whoever the tenants are, then 429.
    assert statuses == [200, 200, 429, 429, 429, 429, 429, 429]
    denied = post(client, "/v1/tailor")
    assert_retry_after(denied, at_most=1)
    assert problem(denied)["type"] == QUOTA_EXCEEDED

    now[0] += 1_000_000_000
    assert [post(client, "/v1/tailor").status_code for _ in range(3)] == [200, 200, 429]


@pytest.mark.security
@pytest.mark.parametrize(
    ("authorization", "error"),
    [
        pytest.param(None, None, id="missing"),
        # RFC 6750 §3.1: no error code when no bearer credentials were attempted.
        pytest.param("Basic dXNlcjpwYXNz", None, id="other-scheme"),
        pytest.param("Bearer", "invalid_request", id="empty-bearer"),
        pytest.param("Bearer not.a.jwt", "invalid_token", id="malformed"),
        pytest.param(bearer("tenant-a", expires_in=-120), "invalid_token", id="expired"),
        pytest.param(
            bearer("tenant-a", key="another-key-that-is-long-enough-0123456789"),
            "invalid_token",
            id="wrong-signature",
        ),
        pytest.param(
            "Bearer " + jwt.encode({"sub": "tenant-a", "exp": IN_FIVE_MINUTES}, "", "none"),
            "invalid_token",
            id="alg-none",
        ),
        pytest.param(
            "Bearer " + jwt.encode({"exp": IN_FIVE_MINUTES}, JWT_KEY, "HS256"),
            "invalid_token",
            id="no-sub",
        ),
        pytest.param(
            "Bearer " + jwt.encode({"sub": "tenant-a"}, JWT_KEY, "HS256"),
            "invalid_token",
            id="no-exp",
        ),
    ],
)
@pytest.mark.parametrize("path", ["/v1/tailor", "/v1/ingest"])
def test_bad_bearer_token_is_401_with_a_bearer_challenge_and_touches_no_redis_key(
    make_app: MakeApp,
    redis_url: str,
    redis_client: redis.Redis,
    caplog: pytest.LogCaptureFixture,
    path: str,
    authorization: str | None,
    error: str | None,
) -> None:
    client = make_app(spec_config(redis_url)).test_client()
    headers = {"X-Tenant-ID": "tenant-a"}
    if authorization is not None:
        headers["Authorization"] = authorization

    with caplog.at_level(logging.DEBUG, logger="sentinel"):
        response = client.post(path, headers=headers)

    assert response.status_code == 401
    challenge = response.headers["WWW-Authenticate"]
    assert challenge.startswith("Bearer")
    if error is None:
        assert challenge == "Bearer"
    else:
        assert f'error="{error}"' in challenge
    assert problem(response)["status"] == 401
    assert "RateLimit" not in response.headers
    assert redis_client.dbsize() == 0
    assert not caplog.records  # no decision, so no log either


def test_tenants_have_separate_buckets_keyed_by_hash_only(
    make_app: MakeApp, redis_url: str, redis_client: redis.Redis
) -> None:
    client = make_app(spec_config(redis_url)).test_client()
    assert [post(client, "/v1/tailor", "tenant-a").status_code for _ in range(4)] == [
        200,
        200,
        200,
        429,
    ]

    assert post(client, "/v1/tailor", "tenant-b").status_code == 200
    keys = [key.decode() for key in redis_client.keys("*") if isinstance(key, bytes)]
    assert len(keys) == 2
    assert not any("tenant-" in key for key in keys)


@pytest.mark.security
def test_x_tenant_id_cannot_move_a_request_to_another_bucket(
    make_app: MakeApp, redis_url: str
) -> None:
    client = make_app(spec_config(redis_url)).test_client()

    statuses = [
        post(client, "/v1/tailor", "tenant-a", headers={"X-Tenant-ID": f"spoof-{i}"}).status_code
        for i in range(4)
    ]

    assert statuses == [200, 200, 200, 429]


@pytest.mark.security
def test_x_forwarded_for_cannot_move_an_anonymous_client_to_another_ip_bucket(
    make_app: MakeApp, redis_url: str
) -> None:
    app = make_app(spec_config(redis_url))
    capacity = network_capacity(app, "auth.login")

    # A fresh client each time: no device cookie, so only the network bucket is shared.
    statuses = [
        fresh_login(
            app,
            "203.0.113.7",
            {"X-Forwarded-For": f"198.51.100.{i}", "X-Real-IP": f"198.51.100.{i}"},
        ).status_code
        for i in range(capacity + 1)
    ]
    assert statuses == [200] * capacity + [429]

    assert fresh_login(app, "192.0.2.1").status_code == 200


def test_anonymous_cookie_is_minted_on_an_allowed_response_only(
    make_app: MakeApp, redis_url: str
) -> None:
    app = make_app(spec_config(redis_url))
    client = app.test_client()
    peer = {"REMOTE_ADDR": "203.0.113.7"}

    first = client.post("/auth/login", environ_base=peer)
    assert first.status_code == 200
    set_cookie = first.headers["Set-Cookie"]
    assert set_cookie.startswith("sentinel_device=v1.")
    assert "HttpOnly" in set_cookie
    assert "SameSite=Lax" in set_cookie
    assert "Secure" not in set_cookie  # "secure": False in the test config
    assert "RateLimit" in first.headers

    # The device is known now: no new cookie; then its bucket (burst 2) runs out.
    second = client.post("/auth/login", environ_base=peer)
    assert second.status_code == 200
    assert "Set-Cookie" not in second.headers
    third = client.post("/auth/login", environ_base=peer)
    assert third.status_code == 429
    assert "Set-Cookie" not in third.headers


def test_a_new_device_denied_by_its_network_gets_no_cookie(
    make_app: MakeApp, redis_url: str
) -> None:
    app = make_app(spec_config(redis_url))
    for _ in range(network_capacity(app, "auth.login")):
        assert fresh_login(app, "203.0.113.7").status_code == 200

    newcomer = fresh_login(app, "203.0.113.7")

    # Denied, and no identity for free: a cookie on a denial would be a fresh device.
    assert newcomer.status_code == 429
    assert "Set-Cookie" not in newcomer.headers
    assert problem(newcomer)["type"] == QUOTA_EXCEEDED


@pytest.mark.security
def test_forged_device_cookie_is_treated_as_absent(make_app: MakeApp, redis_url: str) -> None:
    client = make_app(spec_config(redis_url)).test_client()
    forged = "v1.AAAAAAAAAAAAAAAAAAAAAA.forged-signature"
    client.set_cookie("sentinel_device", forged)

    response = client.post("/auth/login", environ_base={"REMOTE_ADDR": "203.0.113.9"})

    assert response.status_code == 200
    minted = response.headers["Set-Cookie"]
    assert minted.startswith("sentinel_device=v1.")
    assert forged not in minted


def test_fail_closed_anonymous_policy_on_a_dead_redis_sets_no_cookie(
    make_app: MakeApp, dead_redis_url: str
) -> None:
    client = make_app(spec_config(dead_redis_url)).test_client()

    response = client.post("/auth/login")

    assert response.status_code == 503
    assert "Set-Cookie" not in response.headers
    assert problem(response)["type"] == REDUCED_CAPACITY
