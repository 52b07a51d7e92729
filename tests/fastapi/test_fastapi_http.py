"""SPEC §4 through FastAPI: every row of the HTTP table, on a real redis-server.

Each test drives the suite's app (`tests.fastapi.apps`) over ASGI with its lifespan
running; the app's handlers count their runs, so a denial is shown not to run them.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
import redis

from sentinel_core import Decision, DecisionReason, hookimpl
from sentinel_core.resilience._emergency import EmergencyLimiter
from sentinel_core.testing import ratelimit_headers
from tests.fastapi.apps import MakeApp, Probe
from tests.fastapi.conftest import serve
from tests.support.adapter_config import bearer, spec_config

QUOTA_EXCEEDED = "https://iana.org/assignments/http-problem-types#quota-exceeded"
REDUCED_CAPACITY = "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"


class Decisions:
    """A plugin that keeps every decision."""

    def __init__(self) -> None:
        self.seen: list[Decision] = []

    @hookimpl
    def sentinel_decision(self, decision: Decision, request: Any) -> None:
        self.seen.append(decision)


def auth(tenant: str) -> dict[str, str]:
    return {"Authorization": bearer(tenant)}


def assert_problem(response: httpx.Response, status: int, problem_type: str, detail: str) -> None:
    assert response.status_code == status
    assert response.headers["content-type"] == "application/problem+json"
    body = json.loads(response.content)
    assert body["type"] == problem_type
    assert body["status"] == status
    assert body["detail"] == detail
    assert body["title"]


async def test_allowed_request_gets_the_handler_response_with_ratelimit_headers(
    make_app: MakeApp, redis_url: str, probe: Probe
) -> None:
    async with serve(make_app(spec_config(redis_url))) as http:
        response = await http.post("/v1/tailor", headers=auth("acme"))

    assert response.status_code == 200
    assert response.json() == {"resume": "ok", "style": "plain", "user": "dependency-user"}
    fields = ratelimit_headers(response.headers)
    assert fields["policy"]["resumint.tailor"].keys() == {"q", "w", "pk"}
    assert fields["policy"]["resumint.tailor"]["q"] == 3
    assert fields["policy"]["resumint.tailor"]["w"] == 180
    assert list(fields["state"]) == ["resumint.tailor"]
    assert fields["state"]["resumint.tailor"]["r"] == 2
    assert probe.calls == {"tailor": 1}


@pytest.mark.parametrize(
    ("path", "limit", "policy"),
    [("/v1/tailor", 3, "resumint.tailor"), ("/v1/ingest", 3, "pdftalk.ingest")],
    ids=["token_bucket", "sliding_window"],
)
async def test_exhausted_limit_is_429_with_integer_retry_after_and_problem_json(
    make_app: MakeApp, redis_url: str, probe: Probe, path: str, limit: int, policy: str
) -> None:
    async with serve(make_app(spec_config(redis_url))) as http:
        allowed = [await http.post(path, headers=auth("acme")) for _ in range(limit)]
        denied = await http.post(path, headers=auth("acme"))

    assert [response.status_code for response in allowed] == [200] * limit
    assert_problem(denied, 429, QUOTA_EXCEEDED, "rate limit exceeded")
    assert denied.json()["violated-policies"] == [policy]
    retry_after = denied.headers["retry-after"]
    assert retry_after.isdigit()
    assert int(retry_after) >= 1
    assert ratelimit_headers(denied.headers)["state"][policy]["r"] == 0
    assert "set-cookie" not in denied.headers
    assert sum(probe.calls.values()) == limit


async def test_fail_closed_policy_on_a_dead_redis_is_503_and_never_runs_the_handler(
    make_app: MakeApp, dead_redis_url: str, probe: Probe
) -> None:
    async with serve(make_app(spec_config(dead_redis_url))) as http:
        responses = [await http.post("/v1/ingest", headers=auth("acme")) for _ in range(4)]

    for response in responses:
        assert_problem(response, 503, REDUCED_CAPACITY, "rate limiter unavailable")
    # failure_threshold is 3: from then on the breaker knows its quarantine (30 s).
    assert "retry-after" not in responses[0].headers
    assert 1 <= int(responses[3].headers["retry-after"]) <= 30
    assert probe.calls == {}


async def test_fail_open_policy_on_a_dead_redis_is_capped_by_the_emergency_limiter(
    make_app: MakeApp, dead_redis_url: str, probe: Probe
) -> None:
    decisions = Decisions()
    app = make_app(spec_config(dead_redis_url), plugins=[decisions])
    now = [1_000_000_000]
    app.state.sentinel._engine.emergency = EmergencyLimiter(clock_ns=lambda: now[0])
    async with serve(app) as http:
        burst = [await http.post("/v1/tailor", headers=auth(f"t{i}")) for i in range(6)]
        now[0] += 1_000_000_000  # one second: 2 more at 2/second
        later = [await http.post("/v1/tailor", headers=auth("t0")) for _ in range(3)]

    statuses = [response.status_code for response in burst + later]
    assert statuses == [200, 200, 429, 429, 429, 429, 200, 200, 429]
    # The cap is per process and endpoint, not per tenant: six tenants share it.
    for response in burst[2:]:
        assert_problem(response, 429, QUOTA_EXCEEDED, "rate limit exceeded")
        assert int(response.headers["retry-after"]) >= 1
    assert probe.calls == {"tailor": 4}
    reasons = [decision.reason for decision in decisions.seen]
    denied = [reason for reason, status in zip(reasons, statuses, strict=True) if status == 429]
    allowed = {reason for reason, status in zip(reasons, statuses, strict=True) if status == 200}
    assert denied == [DecisionReason.EMERGENCY_LOCAL_LIMIT] * 5
    # Connection errors until the breaker opens (failure_threshold 3), then circuit_open.
    assert allowed == {DecisionReason.REDIS_CONNECTION_ERROR, DecisionReason.CIRCUIT_OPEN}


@pytest.mark.security
@pytest.mark.parametrize(
    "authorization",
    [
        None,
        "Basic YWxhZGRpbjpvcGVuc2VzYW1l",
        "Bearer not.a.jwt",
        bearer("acme", expires_in=-60),
        bearer("acme", key="another-key-of-at-least-32-bytes-long!!"),
    ],
    ids=["missing", "wrong-scheme", "garbage", "expired", "bad-signature"],
)
async def test_bad_bearer_token_is_401_with_a_bearer_challenge_and_touches_no_redis_key(
    make_app: MakeApp,
    redis_url: str,
    redis_client: redis.Redis,
    probe: Probe,
    authorization: str | None,
) -> None:
    headers = {} if authorization is None else {"Authorization": authorization}
    async with serve(make_app(spec_config(redis_url))) as http:
        responses = [
            await http.post("/v1/tailor", headers=headers),
            await http.post("/v1/ingest", headers=headers),
        ]

    for response in responses:
        assert response.status_code == 401
        assert response.headers["www-authenticate"].startswith("Bearer")
        assert response.headers["content-type"] == "application/problem+json"
        assert response.json()["status"] == 401
        assert "ratelimit" not in response.headers
    assert redis_client.dbsize() == 0
    assert probe.calls == {}


async def test_tenants_have_separate_buckets(
    make_app: MakeApp, redis_url: str, probe: Probe
) -> None:
    async with serve(make_app(spec_config(redis_url))) as http:
        acme = [(await http.post("/v1/ingest", headers=auth("acme"))).status_code for _ in range(4)]
        globex = (await http.post("/v1/ingest", headers=auth("globex"))).status_code

    assert acme == [200, 200, 200, 429]
    assert globex == 200


@pytest.mark.security
async def test_spoofed_tenant_and_forwarding_headers_are_ignored(
    make_app: MakeApp, redis_url: str
) -> None:
    async with serve(make_app(spec_config(redis_url))) as http:
        statuses = [
            (
                await http.post(
                    "/v1/ingest",
                    headers={
                        **auth("acme"),
                        "X-Tenant-ID": f"spoof-{i}",
                        "X-Forwarded-For": f"10.9.{i}.1",
                    },
                )
            ).status_code
            for i in range(4)
        ]
        # Anonymous: a new device and X-Forwarded-For each time is still one peer.
        logins = []
        for i in range(3):
            http.cookies.clear()
            response = await http.post("/auth/login", headers={"X-Forwarded-For": f"10.8.{i}.1"})
            logins.append(response.status_code)

    assert statuses == [200, 200, 200, 429]
    assert logins == [200, 200, 429]


async def test_anonymous_cookie_is_minted_on_allow_only_and_then_reused(
    make_app: MakeApp, redis_url: str, probe: Probe
) -> None:
    async with serve(make_app(spec_config(redis_url))) as http:
        first = await http.post("/auth/login")
        http.cookies.clear()
        cookie = first.cookies["sentinel_device"]
        second = await http.post("/auth/login", headers={"Cookie": f"sentinel_device={cookie}"})
        http.cookies.clear()
        # auth.login allows 2/minute per device AND per IP: this peer's IP bucket is empty.
        third = await http.post("/auth/login")

    set_cookie = first.headers["set-cookie"]
    assert set_cookie.startswith("sentinel_device=")
    assert "HttpOnly" in set_cookie
    assert "SameSite=Lax" in set_cookie
    assert "Path=/" in set_cookie
    assert first.status_code == 200
    assert second.status_code == 200
    assert "set-cookie" not in second.headers
    assert third.status_code == 429
    assert "set-cookie" not in third.headers
    assert probe.calls == {"login": 2}


async def test_forged_device_cookie_is_treated_as_absent(make_app: MakeApp, redis_url: str) -> None:
    async with serve(make_app(spec_config(redis_url))) as http:
        response = await http.post(
            "/auth/login", headers={"Cookie": "sentinel_device=forged.value"}
        )

    assert response.status_code == 200
    assert response.cookies["sentinel_device"] != "forged.value"


async def test_handler_returning_its_own_response_keeps_it_and_gains_ratelimit_headers(
    make_app: MakeApp, redis_url: str
) -> None:
    async with serve(make_app(spec_config(redis_url))) as http:
        response = await http.get("/v1/report", headers=auth("acme"))

    assert response.status_code == 200
    assert response.json() == {"report": "ok"}
    assert response.headers["x-report"] == "own"
    assert response.headers["ratelimit"].startswith('"resumint.tailor";r=2;')


async def test_memory_store_serves_the_same_rows_without_redis(
    make_app: MakeApp, probe: Probe
) -> None:
    async with serve(make_app(spec_config("memory://"))) as http:
        statuses = [
            (await http.post("/v1/ingest", headers=auth("acme"))).status_code for _ in range(4)
        ]

    assert statuses == [200, 200, 200, 429]
    assert probe.calls == {"ingest": 3}
