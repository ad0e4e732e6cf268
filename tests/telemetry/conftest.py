"""The OpenTelemetry SDK's own in-memory exporter and metric reader, and a log handler.

Each test gets providers of its own, handed to the gate (``Gate(telemetry=...)``), so
no global provider is set and tests do not see each other's spans.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agent_gate.telemetry.otel import OtelObserver


class Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@dataclass
class Otel:
    exporter: InMemorySpanExporter
    reader: InMemoryMetricReader
    tracer_provider: TracerProvider
    observer: OtelObserver
    logs: Capture
    _metrics: list[Any] = field(default_factory=list)

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def call_spans(self) -> list[ReadableSpan]:
        return [s for s in self.spans() if s.name.startswith("execute_tool ")]

    def points(self, name: str) -> list[Any]:
        """Every data point of metric ``name`` (collected now)."""
        data = self.reader.get_metrics_data()
        found: list[Any] = []
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name == name:
                        found.extend(metric.data.data_points)
        return found

    def all_metrics(self) -> list[Any]:
        data = self.reader.get_metrics_data()
        return [
            metric
            for resource in (data.resource_metrics if data else ())
            for scope in resource.scope_metrics
            for metric in scope.metrics
        ]


@pytest.fixture
def otel() -> Iterator[Otel]:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    capture = Capture()
    root = logging.getLogger("agent_gate")
    level = root.level
    root.addHandler(capture)
    root.setLevel(logging.DEBUG)
    try:
        yield Otel(exporter, reader, tracer_provider,
                   OtelObserver(tracer_provider, meter_provider), capture)
    finally:
        root.removeHandler(capture)
        root.setLevel(level)
        tracer_provider.shutdown()
        meter_provider.shutdown()
