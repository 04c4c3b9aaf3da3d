"""Shared fixtures: the process provider (built once) and an in-memory exporter per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tracing.breakdown import default_breakdown
from tracing.setup import attach_exporter, init_tracing


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """Every sampled span ended during the test."""
    init_tracing("inferbus-test", instance_id="test-1", attributes={"inferbus.model": "m"})
    exporter = InMemorySpanExporter()
    detach = attach_exporter(exporter)
    default_breakdown().snapshot_and_reset()
    yield exporter
    detach()
