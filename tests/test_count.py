"""``count`` (SPEC §2): only listed response statuses consume; the request is still
checked before the handler, without consuming (a peek), so a spent bucket denies.

Framework-free: the configuration, the lifecycle's check and completion, a denied
check reported like any denial, and a store failure during the check answered by the
decision table. The contract suite runs the same through every adapter.
"""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from sentinel_core import ConfigError, Sentinel, load_config
from sentinel_core.adapter import SERVER_ERROR
from sentinel_core.testing import ratelimit_headers
from tests.support.http import make_sentinel, request_view
from tests.support.redis_server import free_port
from tests.support.tokens import HS_SECRET, bearer, hs256

AUTH = {"authorization": bearer(hs256("tenant-a", ttl=3600))}


def config(redis_url: str, **policy: Any) -> dict[str, Any]:
    fields = {"algorithm": "token_bucket", "rate": "1/minute", "burst": 2, "fail_mode": "closed"}
    return {
        "redis_url": redis_url,
        "jwt": {"key": HS_SECRET},
        "policies": {"auth.login": fields | policy},
    }


def test_count_names_statuses_and_classes() -> None:
    loaded = load_config(config("memory://", count=[401, "5XX"]))

    count = loaded.policies["auth.login"].count
    assert count is not None
    assert {401, 500, 599} <= count
    assert {400, 402, 499} & count == set()
    assert load_config(config("memory://")).policies["auth.login"].count is None


@pytest.mark.parametrize(
    ("count", "path"),
    [
        ([], "policies.auth.login.count"),
        ("4xx", "policies.auth.login.count"),
        ([401, "6xx"], "policies.auth.login.count[1]"),
        ([True], "policies.auth.login.count[0]"),
        ([99], "policies.auth.login.count[0]"),
    ],
)
def test_a_malformed_count_is_a_config_error_naming_the_item(count: Any, path: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(config("memory://", count=count))

    assert caught.value.path == path


def counting(redis_url: str, **options: Any) -> Sentinel:
    return make_sentinel(config(redis_url, count=[401]), **options)


def remaining(limiter: Sentinel) -> Any:
    """``r`` of the RateLimit field a request admitted now would carry."""
    admission = limiter.admit(request_view(headers=AUTH), ["auth.login"])
    admission.complete(200)
    return ratelimit_headers(admission.headers(200))["state"]["auth.login"]["r"]


def test_only_a_counted_status_consumes(redis_url: str) -> None:
    limiter = counting(redis_url)

    for status in (200, 302, 403, SERVER_ERROR):
        limiter.admit(request_view(headers=AUTH), ["auth.login"]).complete(status)
    before = remaining(limiter)
    limiter.admit(request_view(headers=AUTH), ["auth.login"]).complete(401)

    after = remaining(limiter)
    limiter.close()

    assert before == 1  # nothing consumed yet: a request would leave one
    assert after == 0


async def test_a_spent_bucket_denies_at_the_check_and_the_denial_is_counted(
    redis_url: str,
) -> None:
    registry = CollectorRegistry()
    limiter = counting(redis_url, registry=registry)
    for _ in range(2):
        await (await limiter.aadmit(request_view(headers=AUTH), ["auth.login"])).acomplete(401)

    denied = await limiter.aadmit(request_view(headers=AUTH), ["auth.login"])
    await limiter.aclose()

    assert denied.denial is not None
    assert denied.denial.status == 429
    labels = {"endpoint_id": "auth.login", "decision_reason": "rate_limited", "allowed": "false"}
    assert registry.get_sample_value("sentinel_decisions_total", labels) == 1


def test_a_store_failure_at_the_check_is_answered_by_the_decision_table() -> None:
    limiter = counting(f"redis://127.0.0.1:{free_port()}/0", entry_points=False)

    admission = limiter.admit(request_view(headers=AUTH), ["auth.login"])
    limiter.close()

    assert admission.denial is not None
    assert admission.denial.status == 503


async def test_a_store_failure_at_the_async_check_too() -> None:
    limiter = counting(f"redis://127.0.0.1:{free_port()}/0", entry_points=False)

    admission = await limiter.aadmit(request_view(headers=AUTH), ["auth.login"])
    await limiter.aclose()

    assert admission.denial is not None
    assert admission.denial.status == 503
