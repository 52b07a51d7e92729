"""SPEC §7 through every adapter: with ``opentelemetry = true`` a guarded request's
current span names its endpoint id and decision reason (the metrics, read back through
the SDK, are in tests/test_opentelemetry.py)."""

from __future__ import annotations

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.contract.conftest import Build
from tests.contract.test_contract import AUTH, contract_config


def test_a_guarded_requests_span_names_the_endpoint_and_the_reason(build: Build) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("server")  # as a server's instrumentation would
    client = build(contract_config("memory://", opentelemetry=True))

    for path in ("/decorated", "/decorated", "/decorated", "/open"):
        with tracer.start_as_current_span(f"POST {path}"):
            client.request("POST" if path == "/decorated" else "GET", path, headers=AUTH)
    provider.shutdown()

    assert [dict(span.attributes or {}) for span in exporter.get_finished_spans()] == [
        {"sentinel.endpoint_id": "small", "sentinel.decision_reason": "allowed"},
        {"sentinel.endpoint_id": "small", "sentinel.decision_reason": "allowed"},
        {"sentinel.endpoint_id": "small", "sentinel.decision_reason": "rate_limited"},
        {},
    ]
