"""The built-in denial log (SPEC §7): one structured WARNING per denial, at most one per
(endpoint, identity, reason) per second (the repeats counted in the next record's
``suppressed``), none for admissions. The log's clock is injected and driven."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from sentinel_core import AnonymousIdentity, Sentinel
from sentinel_core.identity._keys import compact_hash
from sentinel_core.observability._log_throttle import LogThrottle
from sentinel_core.observability._logging import LOG_FIELDS, DecisionLogPlugin
from tests.conftest import make_config
from tests.support.redis_server import free_port

BUCKET = {"algorithm": "token_bucket", "rate": "1/minute", "burst": 2, "fail_mode": "closed"}
TENANT = "acme-secret-tenant@example.com"


SECOND = 1_000_000_000


class Clock:
    """A monotonic nanosecond clock that moves only when told to."""

    def __init__(self) -> None:
        self.now = 5 * SECOND

    def __call__(self) -> int:
        return self.now


def on_clock(sentinel: Sentinel, clock: Clock) -> Sentinel:
    """``sentinel`` with its built-in log plugin on ``clock``."""
    sentinel.plugin_manager.unregister(name="sentinel.logging")
    sentinel._hooks.register_builtin(
        DecisionLogPlugin(sentinel._breaker, clock), "sentinel.logging"
    )
    return sentinel


def memory_sentinel(clock: Clock | None = None, **policies: dict[str, Any]) -> Sentinel:
    config = make_config("memory://", **(policies or {"api__ingest": BUCKET}))
    sentinel = Sentinel(config, registry=CollectorRegistry(), entry_points=False)
    return on_clock(sentinel, clock or Clock())


def dead_sentinel(clock: Clock | None = None, **policies: dict[str, Any]) -> Sentinel:
    config = make_config(f"redis://127.0.0.1:{free_port()}/0", **policies)
    config["breaker"] = {"failure_threshold": 2, "open_seconds": 30}
    sentinel = Sentinel(config, registry=CollectorRegistry(), entry_points=False)
    return on_clock(sentinel, clock or Clock())


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [
        record
        for record in caplog.records
        if record.name == "sentinel" and record.levelno == logging.WARNING
    ]


def assert_no_raw_identity(record: logging.LogRecord) -> None:
    assert TENANT not in record.getMessage()
    for value in vars(record).values():
        assert TENANT not in str(value)


def test_a_denial_logs_one_warning_with_every_field_and_repeats_are_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    sentinel = memory_sentinel(clock)
    with caplog.at_level(logging.WARNING, logger="sentinel"):
        outcomes = [sentinel.evaluate("api.ingest", TENANT) for _ in range(5)]
        clock.now += SECOND - 1
        outcomes.append(sentinel.evaluate("api.ingest", TENANT))  # still within the second
        clock.now += 1
        outcomes.append(sentinel.evaluate("api.ingest", TENANT))
    assert [decision.allowed for decision in outcomes] == [True, True] + [False] * 5
    records = warnings_of(caplog)
    assert len(records) == 2
    for record, decision, suppressed in zip(
        records, (outcomes[2], outcomes[6]), (0, 3), strict=True
    ):
        fields = {name: getattr(record, name) for name in LOG_FIELDS}
        assert fields == {
            "endpoint_id": "api.ingest",
            "decision_reason": "rate_limited",
            "identity_hash": compact_hash(TENANT),
            "identity_kind": "tenant",
            "latency_us": decision.latency_us,
            "breaker_state": "closed",
            "shadow": False,
            "retry_after_seconds": decision.retry_after_seconds,
            "suppressed": suppressed,
        }
        assert isinstance(record.latency_us, int)
        assert "request denied on api.ingest: rate_limited" in record.getMessage()
        assert_no_raw_identity(record)
    assert "more since" not in records[0].getMessage()
    assert "3 more since the last record" in records[1].getMessage()


def test_each_endpoint_identity_and_reason_has_its_own_second(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sentinel = memory_sentinel(api__ingest=BUCKET, api__export=BUCKET)
    with caplog.at_level(logging.WARNING, logger="sentinel"):
        for endpoint in ("api.ingest", "api.export"):
            for tenant in (TENANT, "globex"):
                for _ in range(4):
                    sentinel.evaluate(endpoint, tenant)
    records = warnings_of(caplog)
    assert len(records) == 4
    assert {(r.endpoint_id, r.identity_hash[:8]) for r in records} == {
        (endpoint, compact_hash(tenant)[:8])
        for endpoint in ("api.ingest", "api.export")
        for tenant in (TENANT, "globex")
    }


def test_the_throttle_remembers_a_bounded_number_of_keys() -> None:
    clock = Clock()
    throttle = LogThrottle(clock, max_keys=4)
    assert [throttle.admit(k) for k in "abcd"] == [0, 0, 0, 0]
    assert throttle.admit("a") is None  # counted for a's next record
    assert throttle.admit("e") == 0  # full: the oldest key (a) goes, its count with it
    clock.now += SECOND
    assert throttle.admit("a") == 0
    assert throttle.admit("e") == 0
    assert throttle.admit("e") is None
    clock.now += SECOND
    assert throttle.admit("e") == 1


def test_allowed_decisions_log_nothing(caplog: pytest.LogCaptureFixture) -> None:
    sentinel = memory_sentinel()
    with caplog.at_level(logging.DEBUG, logger="sentinel"):
        assert sentinel.evaluate("api.ingest", TENANT).allowed
        assert sentinel.evaluate("api.ingest", "globex").allowed
    assert [record for record in caplog.records if record.name == "sentinel"] == []


def test_fail_closed_denials_log_their_reason_and_the_breaker_state(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    sentinel = dead_sentinel(
        clock, api__closed={"algorithm": "token_bucket", "rate": "5/second", "fail_mode": "closed"}
    )
    with caplog.at_level(logging.WARNING, logger="sentinel"):
        for _ in range(3):
            sentinel.evaluate("api.closed", TENANT)
            clock.now += SECOND
    records = warnings_of(caplog)
    assert [(r.decision_reason, r.breaker_state) for r in records] == [
        ("fail_closed", "closed"),
        ("fail_closed", "open"),  # this failure opened the breaker
        ("circuit_open", "open"),
    ]
    assert records[2].retry_after_seconds == 30
    for record in records:
        assert_no_raw_identity(record)


def test_fail_open_admissions_log_nothing_and_emergency_denials_log_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sentinel = dead_sentinel(
        api__open={
            "algorithm": "token_bucket",
            "rate": "5/second",
            "fail_mode": "open",
            "fallback_rate": "2/minute",  # emergency capacity: one request
        }
    )
    with caplog.at_level(logging.WARNING, logger="sentinel"):
        first = sentinel.evaluate("api.open", TENANT)
        second = sentinel.evaluate("api.open", TENANT)
    assert first.allowed
    assert not second.allowed
    records = warnings_of(caplog)
    assert len(records) == 1
    assert records[0].decision_reason == "emergency_local_limit"


def test_shadow_would_be_denials_are_logged_as_shadow_while_requests_pass(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    sentinel = memory_sentinel(clock, api__trial={**BUCKET, "shadow": True})
    with caplog.at_level(logging.WARNING, logger="sentinel"):
        outcomes = []
        for _ in range(4):
            outcomes.append(sentinel.evaluate("api.trial", TENANT))
            clock.now += SECOND
    assert all(decision.allowed for decision in outcomes)
    records = warnings_of(caplog)
    assert len(records) == 2
    for record in records:
        assert record.shadow is True
        assert record.decision_reason == "rate_limited"
        assert "shadow" in record.getMessage()
        assert_no_raw_identity(record)


def test_anonymous_denials_say_so(caplog: pytest.LogCaptureFixture) -> None:
    config = make_config(
        "memory://",
        auth__login={**BUCKET, "identity": "anonymous"},
    )
    config["anonymous"] = {"cookie_secret": "s" * 32}
    sentinel = Sentinel(config, registry=CollectorRegistry(), entry_points=False)
    identity = AnonymousIdentity(TENANT, "192.0.2.7", b"k" * 32)
    with caplog.at_level(logging.WARNING, logger="sentinel"):
        for _ in range(3):
            sentinel.evaluate("auth.login", identity)
    (record,) = warnings_of(caplog)
    assert record.identity_kind == "anonymous"
    assert record.identity_hash == identity.hash
    assert "192.0.2.7" not in str(vars(record))
    assert_no_raw_identity(record)


def test_the_log_plugin_can_be_unregistered_by_name(caplog: pytest.LogCaptureFixture) -> None:
    sentinel = memory_sentinel()
    sentinel.plugin_manager.unregister(name="sentinel.logging")
    with caplog.at_level(logging.WARNING, logger="sentinel"):
        for _ in range(4):
            sentinel.evaluate("api.ingest", TENANT)
    assert warnings_of(caplog) == []
