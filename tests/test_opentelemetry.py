"""The built-in OpenTelemetry plugin (SPEC §7): decisions counted and timed through the
OpenTelemetry API, and named on the current span, read back through the SDK's
in-memory reader and exporter.

OpenTelemetry's global providers can be set once per process, and a web framework that
finds them configured starts instrumenting itself (FastAPI does), so the global path
runs in a child process; in this one the plugin is handed a meter provider, and the
spans are the test's own (the plugin reads the current span from the context, whatever
provider made it). The adapters' requests are in tests/contract.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from sentinel_core import ConfigError, Sentinel, load_config
from sentinel_core.observability._metrics import DURATION_BUCKETS
from sentinel_core.observability._otel import OpenTelemetryPlugin

TENANT = "tenant-with-a-secret-name"
POLICIES = {
    "api.search": {
        "algorithm": "token_bucket",
        "rate": "1/minute",
        "burst": 2,
        "fail_mode": "closed",
    }
}


def config(**top: Any) -> dict[str, Any]:
    return {"redis_url": "memory://", "policies": POLICIES, "opentelemetry": True} | top


@pytest.fixture
def reader() -> InMemoryMetricReader:
    return InMemoryMetricReader()


@pytest.fixture
def sentinel(reader: InMemoryMetricReader) -> Sentinel:
    """A Sentinel with ``opentelemetry = true`` whose built-in plugin records into
    ``reader`` instead of the global provider."""
    sentinel = Sentinel(config(), registry=CollectorRegistry(), entry_points=False)
    manager = sentinel.plugin_manager
    manager.unregister(name="sentinel.opentelemetry")
    plugin = OpenTelemetryPlugin(MeterProvider(metric_readers=[reader]))
    manager.register(plugin, "sentinel.opentelemetry")
    return sentinel


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def tracer(exporter: InMemorySpanExporter) -> Iterator[Any]:
    """A tracer of the test's own (not global) provider, its spans in ``exporter``."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider.get_tracer("tests")
    provider.shutdown()


def points(reader: InMemoryMetricReader, name: str) -> list[Any]:
    data = reader.get_metrics_data()
    assert data is not None
    return [
        point
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == name
        for point in metric.data.data_points
    ]


def test_decisions_are_counted_by_endpoint_reason_and_verdict(
    sentinel: Sentinel, reader: InMemoryMetricReader
) -> None:
    for _ in range(3):
        sentinel.evaluate("api.search", TENANT)

    counted = {
        tuple(sorted(point.attributes.items())): point.value
        for point in points(reader, "sentinel.decisions")
    }
    assert counted == {
        (("allowed", True), ("decision_reason", "allowed"), ("endpoint_id", "api.search")): 2,
        (("allowed", False), ("decision_reason", "rate_limited"), ("endpoint_id", "api.search")): 1,
    }


def test_decisions_are_timed_in_seconds_with_sentinels_buckets(
    sentinel: Sentinel, reader: InMemoryMetricReader
) -> None:
    decisions = [sentinel.evaluate("api.search", TENANT) for _ in range(3)]

    (point,) = points(reader, "sentinel.decision.duration")
    assert dict(point.attributes) == {"endpoint_id": "api.search"}
    assert point.count == 3
    assert point.sum == pytest.approx(sum(d.latency_us for d in decisions) / 1_000_000)
    assert tuple(point.explicit_bounds) == DURATION_BUCKETS


def test_the_current_span_is_named_with_the_endpoint_and_the_reason(
    sentinel: Sentinel, tracer: Any, exporter: InMemorySpanExporter
) -> None:
    for _ in range(3):
        with tracer.start_as_current_span("request"):
            sentinel.evaluate("api.search", TENANT)

    attributes = [dict(span.attributes or {}) for span in exporter.get_finished_spans()]
    assert attributes == [
        {"sentinel.endpoint_id": "api.search", "sentinel.decision_reason": "allowed"},
        {"sentinel.endpoint_id": "api.search", "sentinel.decision_reason": "allowed"},
        {"sentinel.endpoint_id": "api.search", "sentinel.decision_reason": "rate_limited"},
    ]


def test_a_decision_outside_any_span_is_only_measured(
    sentinel: Sentinel, reader: InMemoryMetricReader
) -> None:
    assert sentinel.evaluate("api.search", TENANT).allowed
    assert sum(point.value for point in points(reader, "sentinel.decisions")) == 1


def test_no_identity_reaches_any_attribute(
    sentinel: Sentinel, reader: InMemoryMetricReader, tracer: Any, exporter: InMemorySpanExporter
) -> None:
    with tracer.start_as_current_span("request"):
        decision = sentinel.evaluate("api.search", TENANT)

    values = [
        str(value)
        for name in ("sentinel.decisions", "sentinel.decision.duration")
        for point in points(reader, name)
        for value in point.attributes.values()
    ]
    values += [
        str(value)
        for span in exporter.get_finished_spans()
        for value in (span.attributes or {}).values()
    ]
    assert values
    assert not [v for v in values if TENANT in v or decision.identity_hash[:8] in v]


def test_the_plugin_is_registered_only_when_asked_for() -> None:
    on = Sentinel(config(), registry=CollectorRegistry(), entry_points=False)
    off = Sentinel(config(opentelemetry=False), registry=CollectorRegistry(), entry_points=False)

    assert isinstance(on.plugin_manager.get_plugin("sentinel.opentelemetry"), OpenTelemetryPlugin)
    assert off.plugin_manager.get_plugin("sentinel.opentelemetry") is None
    assert load_config(config(opentelemetry=False)).opentelemetry is False


def test_without_opentelemetry_api_the_key_is_a_config_error_naming_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for module in ("opentelemetry", "opentelemetry.metrics", "opentelemetry.trace"):
        monkeypatch.setitem(sys.modules, module, None)  # what `import` finds when absent

    with pytest.raises(ConfigError) as raised:
        load_config(config())

    assert raised.value.path == "opentelemetry"
    assert "sentinel-ratelimit[otel]" in str(raised.value)
    assert load_config(config(opentelemetry=False)).opentelemetry is False


GLOBAL_PROVIDERS = textwrap.dedent(
    """
    import json
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from prometheus_client import CollectorRegistry
    from sentinel_core import Sentinel

    config = json.loads({config!r})
    sentinel = Sentinel(config, registry=CollectorRegistry(), entry_points=False)
    # The application sets its providers after building the Sentinel, as many do.
    reader, exporter = InMemoryMetricReader(), InMemorySpanExporter()
    metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(tracer_provider)
    for _ in range(3):
        with trace.get_tracer("app").start_as_current_span("request"):
            sentinel.evaluate("api.search", "tenant-a")
    found = {{}}
    for resource in reader.get_metrics_data().resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                found[metric.name] = [
                    [dict(p.attributes), getattr(p, "value", None), getattr(p, "count", None)]
                    for p in metric.data.data_points
                ]
    found["spans"] = [dict(span.attributes) for span in exporter.get_finished_spans()]
    print(json.dumps(found, sort_keys=True))
    """
)


def test_opentelemetry_true_records_through_the_global_providers() -> None:
    script = GLOBAL_PROVIDERS.format(config=json.dumps(config()))

    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )

    found = json.loads(result.stdout)
    counted = {point[0]["decision_reason"]: point for point in found["sentinel.decisions"]}
    assert counted == {
        "allowed": [
            {"endpoint_id": "api.search", "decision_reason": "allowed", "allowed": True},
            2,
            None,
        ],
        "rate_limited": [
            {"endpoint_id": "api.search", "decision_reason": "rate_limited", "allowed": False},
            1,
            None,
        ],
    }
    assert found["sentinel.decision.duration"] == [[{"endpoint_id": "api.search"}, None, 3]]
    assert [span["sentinel.decision_reason"] for span in found["spans"]] == [
        "allowed",
        "allowed",
        "rate_limited",
    ]
