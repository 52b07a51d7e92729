"""`DecisionTally`: the per-decision series, exposed exactly as prometheus_client's own
`Counter` and `Histogram` would expose them."""

from __future__ import annotations

import threading

import prometheus_client.metrics
import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from sentinel_core import DecisionReason
from sentinel_core.observability._metrics import DURATION_BUCKETS
from sentinel_core.observability._tally import (
    DECISIONS,
    DECISIONS_HELP,
    DECISIONS_LABELS,
    DURATION,
    DURATION_HELP,
    DecisionTally,
)

R = DecisionReason
DECISIONS_SEEN = [
    # (endpoint, reason, allowed, latency µs): on bounds, between them, past the last
    ("pdftalk.ingest", R.ALLOWED, True, 50),
    ("pdftalk.ingest", R.ALLOWED, True, 51),
    ("pdftalk.ingest", R.RATE_LIMITED, False, 100),
    ("pdftalk.ingest", R.CIRCUIT_OPEN, False, 3),
    ("resumint.tailor", R.ALLOWED, True, 2_500),
    ("resumint.tailor", R.REDIS_TIMEOUT, True, 20_123),
    ("resumint.tailor", R.EMERGENCY_LOCAL_LIMIT, False, 250_000),
    ("resumint.tailor", R.ALLOWED, True, 0),
]


def without_created(exposition: bytes) -> list[str]:
    return [line for line in exposition.decode().splitlines() if "_created" not in line]


def created_series(exposition: bytes) -> list[str]:
    return [
        line.rsplit(" ", 1)[0]
        for line in exposition.decode().splitlines()
        if "_created" in line and not line.startswith("#")
    ]


@pytest.fixture(params=[True, False], ids=["created", "created-disabled"])
def expositions(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> tuple[bytes, bytes]:
    """The same decisions through a `DecisionTally` and through the library's own
    collectors, each in its own registry; with ``_created`` series, and without (what
    PROMETHEUS_DISABLE_CREATED_SERIES sets)."""
    monkeypatch.setattr(prometheus_client.metrics, "_use_created", request.param)
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    tally = DecisionTally(DURATION_BUCKETS)
    ours.register(tally)
    counter = Counter(DECISIONS, DECISIONS_HELP, DECISIONS_LABELS, registry=theirs)
    histogram = Histogram(
        DURATION, DURATION_HELP, ["endpoint_id"], buckets=DURATION_BUCKETS, registry=theirs
    )
    for endpoint, reason, allowed, us in DECISIONS_SEEN:
        tally.record(endpoint, reason, allowed, us)
        counter.labels(endpoint, reason.value, "true" if allowed else "false").inc()
        histogram.labels(endpoint).observe(us / 1_000_000)
    return generate_latest(ours), generate_latest(theirs)


def test_the_exposition_is_the_librarys_own(expositions: tuple[bytes, bytes]) -> None:
    ours, theirs = expositions
    assert without_created(ours) == without_created(theirs)


def test_the_created_series_are_the_librarys_own(
    expositions: tuple[bytes, bytes], request: pytest.FixtureRequest
) -> None:
    ours, theirs = expositions
    assert created_series(ours) == created_series(theirs)
    with_created = "created-disabled" not in request.node.callspec.id
    # six label sets counted, two endpoints timed
    assert len(created_series(ours)) == (8 if with_created else 0)


def test_a_latency_on_a_bound_falls_in_that_bound() -> None:
    registry = CollectorRegistry()
    tally = DecisionTally(DURATION_BUCKETS)
    registry.register(tally)
    tally.record("e", R.ALLOWED, True, 100)
    bucket = f"{DURATION}_bucket"
    assert registry.get_sample_value(bucket, {"endpoint_id": "e", "le": "5e-05"}) == 0
    assert registry.get_sample_value(bucket, {"endpoint_id": "e", "le": "0.0001"}) == 1
    assert registry.get_sample_value(f"{DURATION}_sum", {"endpoint_id": "e"}) == 0.0001


def test_concurrent_threads_lose_no_count() -> None:
    registry = CollectorRegistry()
    tally = DecisionTally(DURATION_BUCKETS)
    registry.register(tally)
    start = threading.Barrier(8)

    def record() -> None:
        start.wait()
        for us in range(10_000):
            tally.record("e", R.ALLOWED, True, us)

    threads = [threading.Thread(target=record) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    labels = {"endpoint_id": "e", "decision_reason": "allowed", "allowed": "true"}
    assert registry.get_sample_value(DECISIONS, labels) == 80_000
    assert registry.get_sample_value(f"{DURATION}_count", {"endpoint_id": "e"}) == 80_000
    assert registry.get_sample_value(f"{DURATION}_sum", {"endpoint_id": "e"}) == pytest.approx(
        8 * sum(range(10_000)) / 1_000_000
    )


def test_its_names_are_refused_twice_in_one_registry() -> None:
    registry = CollectorRegistry()
    registry.register(DecisionTally(DURATION_BUCKETS))
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        Counter(DECISIONS, DECISIONS_HELP, DECISIONS_LABELS, registry=registry)
