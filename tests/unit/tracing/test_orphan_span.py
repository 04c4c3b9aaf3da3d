"""A request the scaler answers for a retired group: a sampled one's trace gets a failed
`process <topic>` span where a worker's would be, and the result continues from it."""

from __future__ import annotations

import json

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from schemas import headers as h
from services.runtime.orphans import orphan_answer, traced
from tests.unit.worker.test_inhand import TOPIC, TS_MS, record
from tracing.setup import init_tracing

TRACE_HEX, SPAN_HEX = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
WHY = "model 'gone' is no longer in the repository"
EVENT = json.dumps(
    {
        "request_id": "r-1",
        "model": "gone",
        "inputs": {"x": {"dtype": "float32", "shape": [1, 2], "data": [[0.5, 0.5]]}},
    }
).encode()


def answered(flags: str) -> tuple[bytes, str | None]:
    parent = f"00-{TRACE_HEX}-{SPAN_HEX}-{flags}".encode()
    request = record(EVENT, headers=[(h.TRACEPARENT, parent)])
    answer = orphan_answer(request, status="model_not_found", why=WHY, now_ms=TS_MS)
    out = traced(
        request,
        answer,
        group="inferbus.workers.gone.interactive",
        status="model_not_found",
        why=WHY,
    )
    assert out.value == answer.value
    return parent, h.header(out.headers, h.TRACEPARENT)


def test_a_sampled_request_gets_a_failed_process_span(spans: InMemorySpanExporter) -> None:
    _, sent_with = answered("01")
    [span] = spans.get_finished_spans()
    assert span.name == f"process {TOPIC}"
    assert span.context is not None and span.parent is not None
    assert (span.context.trace_id, span.parent.span_id) == (int(TRACE_HEX, 16), int(SPAN_HEX, 16))
    assert span.status.status_code == StatusCode.ERROR
    assert span.attributes is not None and span.attributes["error.type"] == "model_not_found"
    assert span.attributes["messaging.consumer.group.name"] == "inferbus.workers.gone.interactive"
    assert span.attributes["inferbus.request_id"] == "r-1"
    assert sent_with == f"00-{TRACE_HEX}-{span.context.span_id:016x}-01", "the result follows it"


def test_an_unsampled_request_gets_none(spans: InMemorySpanExporter) -> None:
    parent, sent_with = answered("00")
    assert spans.get_finished_spans() == ()
    assert sent_with == parent.decode(), "its own context, as it came"


def test_a_traceparent_with_no_value_is_no_trace(spans: InMemorySpanExporter) -> None:
    # Kafka allows a header without a value; the sweep must not stop on one.
    request = record(EVENT, headers=[(h.TRACEPARENT, None)])  # type: ignore[list-item]
    answer = orphan_answer(request, status="model_not_found", why=WHY, now_ms=TS_MS)
    out = traced(request, answer, group="g", status="model_not_found", why=WHY)
    assert h.header(out.headers, h.TRACEPARENT) is None and spans.get_finished_spans() == ()


def test_the_last_traceparent_counts(spans: InMemorySpanExporter) -> None:
    parent = f"00-{TRACE_HEX}-{SPAN_HEX}-01".encode()
    request = record(EVENT, headers=[(h.TRACEPARENT, b""), (h.TRACEPARENT, parent)])
    answer = orphan_answer(request, status="model_not_found", why=WHY, now_ms=TS_MS)
    traced(request, answer, group="g", status="model_not_found", why=WHY)
    assert len(spans.get_finished_spans()) == 1


def test_no_span_where_none_is_exported() -> None:
    # A span nobody exports would leave the result's trace hanging from a missing parent.
    # The provider is built (as the `spans` fixture builds it), so a span would record.
    init_tracing("inferbus-test", instance_id="test-1", attributes={"inferbus.model": "m"})
    parent = f"00-{TRACE_HEX}-{SPAN_HEX}-01".encode()
    request = record(EVENT, headers=[(h.TRACEPARENT, parent)])
    answer = orphan_answer(request, status="model_not_found", why=WHY, now_ms=TS_MS)
    out = traced(request, answer, group="g", status="model_not_found", why=WHY)
    assert h.header(out.headers, h.TRACEPARENT) == parent.decode()
