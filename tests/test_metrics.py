"""The built-in Prometheus metrics (SPEC §7), read back from a fresh registry per test."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead

from sentinel_core import BreakerState, DecisionReason, Sentinel
from sentinel_core.observability._metrics import DURATION_BUCKETS, MetricsPlugin
from sentinel_core.resilience._breaker import CircuitBreaker
from tests.conftest import make_config
from tests.support.redis_server import free_port
from tests.support.tcp_proxy import TcpProxy

SPEC_METRICS = (
    "sentinel_decisions_total",
    "sentinel_decision_duration_seconds",
    "sentinel_breaker_state",
    "sentinel_breaker_transitions_total",
)
BUCKET = {"algorithm": "token_bucket", "rate": "1/minute", "burst": 2, "fail_mode": "closed"}
INGEST = {"algorithm": "token_bucket", "rate": "5/second", "fail_mode": "closed"}


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


def memory_sentinel(registry: CollectorRegistry | None, **policies: dict[str, Any]) -> Sentinel:
    config = make_config("memory://", **(policies or {"api__ingest": BUCKET}))
    return Sentinel(config, registry=registry, entry_points=False)


def dead_sentinel(registry: CollectorRegistry, **policies: dict[str, Any]) -> Sentinel:
    """A Sentinel whose Redis is a closed loopback port: every call is a connection error."""
    config = make_config(f"redis://127.0.0.1:{free_port()}/0", **policies)
    config["breaker"] = {"failure_threshold": 2, "open_seconds": 30}
    return Sentinel(config, registry=registry, entry_points=False)


def decisions(
    registry: CollectorRegistry, endpoint: str, reason: str, allowed: str
) -> float | None:
    return registry.get_sample_value(
        "sentinel_decisions_total",
        {"endpoint_id": endpoint, "decision_reason": reason, "allowed": allowed},
    )


def gauge(registry: CollectorRegistry) -> float | None:
    return registry.get_sample_value("sentinel_breaker_state")


def gauge_of(registry: CollectorRegistry, pid: str) -> float | None:
    """A multiprocess worker's breaker state (``liveall`` adds a ``pid`` label)."""
    return registry.get_sample_value("sentinel_breaker_state", {"pid": pid})


def transitions(registry: CollectorRegistry, state: str) -> float | None:
    return registry.get_sample_value("sentinel_breaker_transitions_total", {"state": state})


def series(registry: CollectorRegistry) -> list[tuple[str, dict[str, str]]]:
    return [
        (sample.name, sample.labels)
        for metric in registry.collect()
        for sample in metric.samples
        if not sample.name.endswith("_created")
    ]


def test_every_spec_metric_is_in_the_exposition(registry: CollectorRegistry) -> None:
    memory_sentinel(registry).evaluate("api.ingest", "acme")
    exposition = generate_latest(registry).decode()
    for name in (*SPEC_METRICS, "sentinel_shadow_denials_total"):
        assert f"# TYPE {name.removesuffix('_total')}" in exposition


def test_decisions_are_counted_per_endpoint_reason_and_allowed(
    registry: CollectorRegistry,
) -> None:
    sentinel = memory_sentinel(registry)
    for _ in range(5):
        sentinel.evaluate("api.ingest", "acme")
    assert decisions(registry, "api.ingest", "allowed", "true") == 2
    assert decisions(registry, "api.ingest", "rate_limited", "false") == 3
    assert decisions(registry, "api.ingest", "rate_limited", "true") is None


def test_every_decision_is_counted_and_timed(registry: CollectorRegistry) -> None:
    sentinel = memory_sentinel(registry)
    for _ in range(5):
        sentinel.evaluate("api.ingest", "acme")
    assert decisions(registry, "api.ingest", "allowed", "true") == 2
    assert decisions(registry, "api.ingest", "rate_limited", "false") == 3
    labels = {"endpoint_id": "api.ingest"}
    assert registry.get_sample_value("sentinel_decision_duration_seconds_count", labels) == 5


def test_store_failures_are_counted_with_their_reason(registry: CollectorRegistry) -> None:
    sentinel = dead_sentinel(
        registry,
        api__closed={"algorithm": "token_bucket", "rate": "5/second", "fail_mode": "closed"},
        api__open={
            "algorithm": "token_bucket",
            "rate": "5/second",
            "fail_mode": "open",
            "fallback_rate": "100/second",
        },
    )
    sentinel.evaluate("api.open", "acme")
    sentinel.evaluate("api.closed", "acme")
    sentinel.evaluate("api.closed", "acme")  # the breaker is open now: no Redis call
    assert decisions(registry, "api.open", "redis_connection_error", "true") == 1
    assert decisions(registry, "api.closed", "fail_closed", "false") == 1
    assert decisions(registry, "api.closed", "circuit_open", "false") == 1


def failures(registry: CollectorRegistry, endpoint: str, cause: str) -> float | None:
    return registry.get_sample_value(
        "sentinel_store_failures_total", {"endpoint_id": endpoint, "cause": cause}
    )


def test_store_failures_keep_their_cause_whatever_the_fail_mode(
    registry: CollectorRegistry, redis_server: Any
) -> None:
    """A fail-closed timeout is decision_reason fail_closed and an emergency denial
    emergency_local_limit; sentinel_store_failures_total still says "redis_timeout"."""
    with TcpProxy(redis_server.port, "blackhole") as proxy:
        config = make_config(
            proxy.url,
            api__closed={"algorithm": "token_bucket", "rate": "5/second", "fail_mode": "closed"},
            api__open={
                "algorithm": "token_bucket",
                "rate": "5/second",
                "fail_mode": "open",
                "fallback_rate": "1/minute",
            },
        )
        config["socket_timeout_ms"] = 50
        config["breaker"] = {"failure_threshold": 4}
        sentinel = Sentinel(config, registry=registry, entry_points=False)
        closed = sentinel.evaluate("api.closed", "acme")
        admitted = sentinel.evaluate("api.open", "acme")
        denied = sentinel.evaluate("api.open", "acme")
        assert (closed.reason, closed.store_failure) == (
            DecisionReason.FAIL_CLOSED,
            DecisionReason.REDIS_TIMEOUT,
        )
        assert (admitted.reason, admitted.store_failure) == (
            DecisionReason.REDIS_TIMEOUT,
            DecisionReason.REDIS_TIMEOUT,
        )
        assert (denied.reason, denied.store_failure) == (
            DecisionReason.EMERGENCY_LOCAL_LIMIT,
            DecisionReason.REDIS_TIMEOUT,
        )
        assert failures(registry, "api.closed", "redis_timeout") == 1
        assert failures(registry, "api.open", "redis_timeout") == 2
        sentinel.evaluate("api.closed", "acme")  # the fourth failure opens the breaker
        short_circuited = sentinel.evaluate("api.closed", "acme")
        assert short_circuited.reason is DecisionReason.CIRCUIT_OPEN
        assert short_circuited.store_failure is None, "an open breaker makes no call"
        assert failures(registry, "api.closed", "redis_timeout") == 2
        sentinel.close()


def test_a_connection_error_is_counted_as_one(registry: CollectorRegistry) -> None:
    sentinel = dead_sentinel(
        registry,
        api__closed={"algorithm": "token_bucket", "rate": "5/second", "fail_mode": "closed"},
    )
    assert sentinel.evaluate("api.closed", "acme").store_failure is (
        DecisionReason.REDIS_CONNECTION_ERROR
    )
    assert failures(registry, "api.closed", "redis_connection_error") == 1
    assert sentinel.evaluate("api.closed", "acme").store_failure is (
        DecisionReason.REDIS_CONNECTION_ERROR
    )
    assert failures(registry, "api.closed", "redis_connection_error") == 2


def test_the_duration_histogram_observes_every_decision(registry: CollectorRegistry) -> None:
    sentinel = memory_sentinel(registry)
    for _ in range(4):
        sentinel.evaluate("api.ingest", "acme")
    labels = {"endpoint_id": "api.ingest"}
    assert registry.get_sample_value("sentinel_decision_duration_seconds_count", labels) == 4
    total = registry.get_sample_value("sentinel_decision_duration_seconds_sum", labels)
    assert total is not None
    assert 0 < total < 1


def test_latency_is_observed_in_seconds_in_the_microsecond_buckets(
    registry: CollectorRegistry,
) -> None:
    sentinel = memory_sentinel(registry)
    decision = sentinel.evaluate("api.ingest", "acme")
    plugin = MetricsPlugin(registry)

    def bucket(le: float) -> float | None:
        return registry.get_sample_value(
            "sentinel_decision_duration_seconds_bucket",
            {"endpoint_id": "api.ingest", "le": str(le)},
        )

    before = {le: bucket(le) for le in DURATION_BUCKETS}
    plugin.sentinel_decision(decision=replace(decision, latency_us=300), request=None)
    after = {le: bucket(le) for le in DURATION_BUCKETS}
    grew = [le for le in DURATION_BUCKETS if after[le] != before[le]]
    assert grew == [le for le in DURATION_BUCKETS if le >= 0.0005]  # 300 µs <= 0.5 ms
    assert DURATION_BUCKETS[0] == 0.00005
    assert DURATION_BUCKETS[-1] == 0.1


def test_the_breaker_gauge_starts_closed(registry: CollectorRegistry) -> None:
    memory_sentinel(registry)
    assert gauge(registry) == 0
    for state in ("closed", "open", "half_open"):
        assert transitions(registry, state) == 0


def test_the_breaker_gauge_follows_a_real_outage_to_open(registry: CollectorRegistry) -> None:
    sentinel = dead_sentinel(
        registry,
        api__ingest=INGEST,
    )
    sentinel.evaluate("api.ingest", "acme")
    assert gauge(registry) == 0
    assert sentinel.breaker_state is BreakerState.CLOSED
    sentinel.evaluate("api.ingest", "acme")
    assert sentinel.breaker_state is BreakerState.OPEN
    assert gauge(registry) == 1
    assert transitions(registry, "open") == 1


def test_the_breaker_gauge_follows_every_transition(registry: CollectorRegistry) -> None:
    """A breaker on an injected clock, reporting through a Sentinel's hooks, walks the
    whole cycle: CLOSED -> OPEN -> HALF_OPEN -> OPEN -> HALF_OPEN -> CLOSED."""
    sentinel = memory_sentinel(registry)
    now = [0.0]
    breaker = CircuitBreaker(
        1, 30, clock=lambda: now[0], on_transition=sentinel._hooks.breaker_transition
    )
    breaker.record_failure(_permit(breaker))
    assert gauge(registry) == 1
    now[0] += 30
    probe = _permit(breaker)
    assert gauge(registry) == 2
    breaker.record_failure(probe)
    assert gauge(registry) == 1
    now[0] += 30
    breaker.record_success(_permit(breaker))
    assert gauge(registry) == 0
    assert transitions(registry, "open") == 2
    assert transitions(registry, "half_open") == 2
    assert transitions(registry, "closed") == 1


class Clock:
    """An injected monotonic clock that moves only when the test says so."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def clocked_sentinel(
    url: str, registry: CollectorRegistry, clock: Clock, open_seconds: int, **options: Any
) -> Sentinel:
    """A Sentinel on ``url`` whose breaker opens at the first failure, for
    ``open_seconds`` of ``clock``; ``options`` are more top-level keys."""
    config = make_config(url, api__ingest=INGEST)
    config["breaker"] = {"failure_threshold": 1, "open_seconds": open_seconds}
    config.update(options)
    return Sentinel(config, registry=registry, entry_points=False, clock=clock)


def test_an_idle_breaker_reads_half_open_at_the_next_scrape_without_a_request(
    registry: CollectorRegistry,
) -> None:
    """SPEC §3: once ``open_seconds`` have passed, the gauge says half-open (2) with no
    request to move the breaker; the transition is counted once, however many scrapes."""
    clock = Clock()
    sentinel = clocked_sentinel(f"redis://127.0.0.1:{free_port()}/0", registry, clock, 30)
    sentinel.evaluate("api.ingest", "acme")
    assert gauge(registry) == 1
    clock.now += 29.9
    assert gauge(registry) == 1
    clock.now += 0.1
    assert gauge(registry) == 2
    assert gauge(registry) == 2
    assert transitions(registry, "half_open") == 1
    assert sentinel.breaker_state is BreakerState.HALF_OPEN


def test_after_redis_recovers_an_idle_breaker_stops_reading_open_and_one_request_closes_it(
    registry: CollectorRegistry, redis_server: Any
) -> None:
    clock = Clock()
    with TcpProxy(redis_server.port, "blackhole") as proxy:
        sentinel = clocked_sentinel(proxy.url, registry, clock, 30, socket_timeout_ms=50)
        assert sentinel.evaluate("api.ingest", "acme").reason is DecisionReason.FAIL_CLOSED
        assert gauge(registry) == 1
        proxy.mode = "forward"  # Redis is back; this process sees no request for a while
        proxy.drop_connections()
        clock.now += 60
        assert gauge(registry) == 2
        assert sentinel.evaluate("api.ingest", "acme").allowed  # the probe
        assert gauge(registry) == 0
        assert [transitions(registry, state) for state in ("open", "half_open", "closed")] == [
            1,
            1,
            1,
        ]


def test_a_shared_registry_reads_every_breaker_at_each_scrape(registry: CollectorRegistry) -> None:
    clock = Clock()
    healthy = memory_sentinel(registry)
    idle = clocked_sentinel(f"redis://127.0.0.1:{free_port()}/0", registry, clock, 5)
    idle.evaluate("api.ingest", "acme")
    assert gauge(registry) == 1
    clock.now += 5
    assert gauge(registry) == 2
    assert healthy.breaker_state is BreakerState.CLOSED


def _permit(breaker: CircuitBreaker) -> Any:
    permit = breaker.acquire()
    assert permit is not None
    return permit


def test_separate_registries_do_not_collide() -> None:
    first, second = CollectorRegistry(), CollectorRegistry()
    a, b = memory_sentinel(first), memory_sentinel(second)
    a.evaluate("api.ingest", "acme")
    a.evaluate("api.ingest", "acme")
    b.evaluate("api.ingest", "acme")
    assert decisions(first, "api.ingest", "allowed", "true") == 2
    assert decisions(second, "api.ingest", "allowed", "true") == 1


def test_sentinels_sharing_a_registry_add_up(registry: CollectorRegistry) -> None:
    a, b = memory_sentinel(registry), memory_sentinel(registry)
    a.evaluate("api.ingest", "acme")
    b.evaluate("api.ingest", "globex")
    assert decisions(registry, "api.ingest", "allowed", "true") == 2


def test_a_shared_registry_gauge_shows_the_least_healthy_breaker(
    registry: CollectorRegistry,
) -> None:
    healthy = memory_sentinel(registry)
    broken = dead_sentinel(
        registry,
        api__ingest=INGEST,
    )
    broken.evaluate("api.ingest", "acme")
    broken.evaluate("api.ingest", "acme")
    healthy.evaluate("api.ingest", "acme")
    assert broken.breaker_state is BreakerState.OPEN
    assert gauge(registry) == 1
    del broken
    gc.collect()
    assert gauge(registry) == 0  # the open breaker's Sentinel is gone
    assert healthy.breaker_state is BreakerState.CLOSED


def test_without_a_registry_the_default_registry_is_used() -> None:
    def allowed() -> float:
        return decisions(REGISTRY, "api.defaults", "allowed", "true") or 0.0

    before = allowed()
    memory_sentinel(None, api__defaults=BUCKET).evaluate("api.defaults", "acme")
    memory_sentinel(None, api__defaults=BUCKET).evaluate("api.defaults", "acme")
    assert allowed() == before + 2


def test_ten_thousand_tenants_leave_the_series_unchanged(registry: CollectorRegistry) -> None:
    sentinel = memory_sentinel(registry)
    for _ in range(3):  # both reasons' series exist before counting
        sentinel.evaluate("api.ingest", "warm-up")
    before = series(registry)
    for index in range(10_000):
        assert sentinel.evaluate("api.ingest", f"tenant-{index}-secret").allowed
    after = series(registry)
    assert after == before
    assert decisions(registry, "api.ingest", "allowed", "true") == 10_002


def test_no_label_value_contains_an_identity(registry: CollectorRegistry) -> None:
    sentinel = memory_sentinel(registry)
    tenants = [f"tenant-{index}@example.com" for index in range(50)]
    reasons = set()
    for tenant in tenants:
        for _ in range(3):
            decision = sentinel.evaluate("api.ingest", tenant)
            reasons.add(decision.reason)
            assert decision.identity_hash not in str(series(registry))
    assert reasons == {DecisionReason.ALLOWED, DecisionReason.RATE_LIMITED}
    for _, labels in series(registry):
        for value in labels.values():
            assert "tenant-" not in value
            assert "@" not in value
            assert len(value) < 64  # no hash either


def test_shadow_denials_are_visible_while_requests_pass(registry: CollectorRegistry) -> None:
    sentinel = memory_sentinel(registry, api__trial={**BUCKET, "shadow": True})
    results = [sentinel.evaluate("api.trial", "acme") for _ in range(5)]
    assert all(decision.allowed for decision in results)
    assert [decision.would_allow for decision in results] == [True, True, False, False, False]
    assert decisions(registry, "api.trial", "rate_limited", "true") == 3
    assert decisions(registry, "api.trial", "allowed", "true") == 2
    assert (
        registry.get_sample_value(
            "sentinel_shadow_denials_total",
            {"endpoint_id": "api.trial", "decision_reason": "rate_limited"},
        )
        == 3
    )


def test_enforcing_denials_are_not_counted_as_shadow(registry: CollectorRegistry) -> None:
    sentinel = memory_sentinel(registry)
    for _ in range(4):
        sentinel.evaluate("api.ingest", "acme")
    assert decisions(registry, "api.ingest", "rate_limited", "false") == 2
    assert (
        registry.get_sample_value(
            "sentinel_shadow_denials_total",
            {"endpoint_id": "api.ingest", "decision_reason": "rate_limited"},
        )
        is None
    )


def test_the_metrics_plugin_can_be_unregistered_by_name(registry: CollectorRegistry) -> None:
    sentinel = memory_sentinel(registry)
    sentinel.plugin_manager.unregister(name="sentinel.metrics")
    sentinel.evaluate("api.ingest", "acme")
    assert decisions(registry, "api.ingest", "allowed", "true") == 0


def test_every_endpoint_has_its_allowed_series_from_the_start(registry: CollectorRegistry) -> None:
    """Made at start-up (so rate() and dashboards see a 0, and the hot path finds them
    with one lookup), counted from the first decision on."""
    sentinel = memory_sentinel(registry)
    assert decisions(registry, "api.ingest", "allowed", "true") == 0
    sentinel.evaluate("api.ingest", "acme")
    assert decisions(registry, "api.ingest", "allowed", "true") == 1


def test_an_allowed_decision_no_start_up_bound_is_counted_too(registry: CollectorRegistry) -> None:
    """A metrics plugin no Sentinel started (registered by hand) makes the series of an
    allowed decision when it first sees one."""
    decision = memory_sentinel(CollectorRegistry()).evaluate("api.ingest", "acme")
    MetricsPlugin(registry).sentinel_decision(decision=decision, request=None)
    assert decisions(registry, "api.ingest", "allowed", "true") == 1


WORKER = """
import sys
from sentinel_core import Sentinel

url, decisions = sys.argv[1], int(sys.argv[2])
open_seconds = int(sys.argv[3]) if len(sys.argv) > 3 else 30
policy = {"algorithm": "token_bucket", "rate": "2/minute", "fail_mode": "closed"}
breaker = {"failure_threshold": 1, "open_seconds": open_seconds}
config = {"redis_url": url, "breaker": breaker, "policies": {"api.x": policy}}
sentinel = Sentinel(config, entry_points=False)
for _ in range(decisions):
    sentinel.evaluate("api.x", "tenant")
print("ready", flush=True)
sys.stdin.readline()  # stay alive, like a worker, until the test lets go
"""


@pytest.mark.slow
def test_multiprocess_workers_add_up_and_keep_one_breaker_series_each(tmp_path: Path) -> None:
    """The documented gunicorn setup: PROMETHEUS_MULTIPROC_DIR, a MultiProcessCollector on
    a fresh registry, and ``mark_process_dead`` when a worker exits."""
    environment = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    dead = f"redis://127.0.0.1:{free_port()}/0"
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, url, str(count)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=environment,
            text=True,
        )
        for url, count in (("memory://", 3), (dead, 2))
    ]
    try:
        for worker in workers:
            assert worker.stdout is not None
            assert worker.stdout.readline().strip() == "ready"
        healthy, broken = (str(worker.pid) for worker in workers)
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=str(tmp_path))
        assert gauge_of(registry, healthy) == 0
        assert gauge_of(registry, broken) == 1
        assert decisions(registry, "api.x", "allowed", "true") == 2
        assert decisions(registry, "api.x", "rate_limited", "false") == 1
        assert decisions(registry, "api.x", "fail_closed", "false") == 1
        assert decisions(registry, "api.x", "circuit_open", "false") == 1
        assert transitions(registry, "open") == 1
    finally:
        for worker in workers:
            worker.communicate("\n", timeout=30)
    mark_process_dead(int(broken), str(tmp_path))
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(tmp_path))
    assert gauge_of(registry, broken) is None  # a dead worker's breaker is not reported
    assert gauge_of(registry, healthy) == 0
    assert decisions(registry, "api.x", "circuit_open", "false") == 1  # counts survive


@pytest.mark.slow
def test_an_idle_multiprocess_worker_reports_half_open_once_its_quarantine_ends(
    tmp_path: Path,
) -> None:
    """Under multiprocess mode the collector reads the worker's file, not its live gauge:
    the breaker's own wake-up writes HALF_OPEN there, with no request and no scrape in
    the worker (a 1 s quarantine on the real clock)."""
    environment = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    dead = f"redis://127.0.0.1:{free_port()}/0"
    worker = subprocess.Popen(
        [sys.executable, "-c", WORKER, dead, "1", "1"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=environment,
        text=True,
    )
    try:
        assert worker.stdout is not None
        assert worker.stdout.readline().strip() == "ready"

        def state() -> float | None:
            registry = CollectorRegistry()
            MultiProcessCollector(registry, path=str(tmp_path))
            return gauge_of(registry, str(worker.pid))

        seen = {state()}
        deadline = time.monotonic() + 20
        while 2 not in seen and time.monotonic() < deadline:
            seen.add(state())
            time.sleep(0.05)  # polling another process's file: nothing to inject a clock into
        assert 2 in seen
    finally:
        worker.communicate("\n", timeout=30)
