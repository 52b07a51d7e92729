"""The per-decision metrics of one registry, counted cheaply and exposed on collection.

Every decision increments ``sentinel_decisions_total`` and observes
``sentinel_decision_duration_seconds`` (SPEC §7). Through prometheus_client's own
`Counter` and `Histogram` that costs three locked value updates and a Python scan of the
buckets (~3.5 µs, more than the rest of a short-circuited decision, and it lands right
after the Redis round trip, where cold caches double it). `DecisionTally` keeps the same
two series as plain integers behind one lock and builds the metric families only when
the registry is collected: the exposition is unchanged (same names, help, labels,
buckets, ``_created`` for the counter), each decision costs one lock and a few dict
operations.

Under prometheus_client's multiprocess mode values must reach the shared files on every
update, so there `SentinelMetrics` keeps the library's own collectors
(`multiprocess_mode`).
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_left
from collections.abc import Callable, Iterator, Sequence
from typing import cast

from prometheus_client import metrics, values
from prometheus_client.metrics_core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString

from sentinel_core._models import DecisionReason

DECISIONS = "sentinel_decisions_total"
DECISIONS_HELP = "Rate limiting decisions, by endpoint, reason and whether the request passed."
DECISIONS_LABELS = ("endpoint_id", "decision_reason", "allowed")
DURATION = "sentinel_decision_duration_seconds"
DURATION_HELP = "Time to decide one request, Redis round trip included."

_go_float = cast(Callable[[float], str], floatToGoString)  # how the library prints `le`


def multiprocess_mode() -> bool:
    """Whether prometheus_client writes values to multiprocess files (it decides once, on
    import, from ``PROMETHEUS_MULTIPROC_DIR``)."""
    return values.ValueClass is not values.MutexValue


class DecisionTally:
    """`sentinel_decisions_total` and `sentinel_decision_duration_seconds` as a custom
    collector; register it on a registry like any collector.

    Args:
        buckets: the histogram's upper bounds in seconds, ascending, without +Inf.
    """

    def __init__(self, buckets: Sequence[float]) -> None:
        self._bucket_labels = tuple(_go_float(bound) for bound in (*buckets, float("inf")))
        # Latencies arrive as whole microseconds: compare them with bounds in µs, so
        # the bucket of a value on a bound is the one prometheus_client would pick.
        self._bounds_us = tuple(round(bound * 1_000_000) for bound in buckets)
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, DecisionReason, bool], int] = {}
        self._created: dict[tuple[str, DecisionReason, bool], float] = {}
        self._histograms: dict[str, list[int]] = {}
        """endpoint id -> per-bucket counts (not cumulative; +Inf last), then the sum in µs"""
        self._histograms_created: dict[str, float] = {}

    def record(self, endpoint_id: str, reason: DecisionReason, allowed: bool, us: int) -> None:
        key = (endpoint_id, reason, allowed)
        slot = bisect_left(self._bounds_us, us)
        with self._lock:
            count = self._counts.get(key)
            if count is None:
                self._created[key] = time.time()
                count = 0
            self._counts[key] = count + 1
            histogram = self._histograms.get(endpoint_id)
            if histogram is None:
                histogram = self._histograms[endpoint_id] = [0] * (len(self._bounds_us) + 2)
                self._histograms_created[endpoint_id] = time.time()
            histogram[slot] += 1
            histogram[-1] += us

    def describe(self) -> list[Metric]:
        return list(self._families())

    def _families(self) -> tuple[CounterMetricFamily, HistogramMetricFamily]:
        return (
            CounterMetricFamily(DECISIONS, DECISIONS_HELP, labels=DECISIONS_LABELS),
            HistogramMetricFamily(DURATION, DURATION_HELP, labels=("endpoint_id",)),
        )

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            counts = list(self._counts.items())
            created = dict(self._created)
            histograms = [(endpoint, list(h)) for endpoint, h in self._histograms.items()]
            histograms_created = dict(self._histograms_created)
        # Like prometheus_client's own collectors: _created series unless disabled
        # (PROMETHEUS_DISABLE_CREATED_SERIES).
        with_created = getattr(metrics, "_use_created", True)
        decisions, duration = self._families()
        for (endpoint, reason, allowed), count in counts:
            labels = [endpoint, reason.value, "true" if allowed else "false"]
            since = created[(endpoint, reason, allowed)] if with_created else None
            decisions.add_metric(labels, count, created=since)
        for endpoint, histogram in histograms:
            cumulative, buckets = 0, []
            for label, count in zip(self._bucket_labels, histogram[:-1], strict=True):
                cumulative += count
                buckets.append((label, cumulative))
            duration.add_metric([endpoint], buckets, histogram[-1] / 1_000_000)
            if with_created:
                duration.add_sample(
                    f"{DURATION}_created", {"endpoint_id": endpoint}, histograms_created[endpoint]
                )
        yield decisions
        yield duration
