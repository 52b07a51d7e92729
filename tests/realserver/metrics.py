"""What a server's workers counted, read from prometheus_client's multiprocess files.

Every worker writes its metrics to ``PROMETHEUS_MULTIPROC_DIR`` (one file per process
and kind, named after the pid); the test reads them as a Prometheus scrape of the whole
server would, through `MultiProcessCollector`, and one process at a time to see how the
decisions were spread over the workers.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric
from prometheus_client.multiprocess import MultiProcessCollector

DECISIONS = "sentinel_decisions_total"
BREAKER_STATE = "sentinel_breaker_state"
FAIL_OPEN_REASONS = frozenset(
    {"redis_timeout", "redis_connection_error", "redis_noscript_retry", "circuit_open"}
)
"""The reasons of a request the emergency limiter admitted while Redis was unavailable."""


class ServerMetrics:
    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def decisions(self) -> Counter[str]:
        """Decisions summed over every worker, by ``allowed`` ("true"/"false")."""
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=str(self.directory))
        return _decisions(registry.collect())

    def decisions_by_process(self) -> dict[int, int]:
        """pid -> decisions that worker made."""
        counts: dict[int, int] = {}
        for path in self.directory.glob("counter_*.db"):
            pid = int(path.stem.rsplit("_", 1)[1])
            counts[pid] = sum(_decisions(MultiProcessCollector.merge([str(path)])).values())
        return counts

    def fail_open_admissions(self, endpoint_id: str) -> dict[int, int]:
        """pid -> requests of ``endpoint_id`` that worker's emergency limiter admitted."""
        counts: dict[int, int] = {}
        for path in self.directory.glob("counter_*.db"):
            pid = int(path.stem.rsplit("_", 1)[1])
            counts[pid] = sum(
                int(sample.value)
                for metric in MultiProcessCollector.merge([str(path)])
                for sample in metric.samples
                if sample.name == DECISIONS
                and sample.labels["endpoint_id"] == endpoint_id
                and sample.labels["allowed"] == "true"
                and sample.labels["decision_reason"] in FAIL_OPEN_REASONS
            )
        return counts

    def breaker_states(self) -> dict[int, int]:
        """pid -> the state of that worker's breaker (0 closed, 1 open, 2 half-open): one
        entry per worker that has built its Sentinel."""
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=str(self.directory))
        return {
            int(sample.labels["pid"]): int(sample.value)
            for metric in registry.collect()
            for sample in metric.samples
            if sample.name == BREAKER_STATE
        }


def _decisions(metrics: Iterable[Metric]) -> Counter[str]:
    totals: Counter[str] = Counter()
    for metric in metrics:
        for sample in metric.samples:
            if sample.name == DECISIONS:
                totals[sample.labels["allowed"]] += int(sample.value)
    return totals
