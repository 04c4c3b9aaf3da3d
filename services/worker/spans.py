"""The worker's spans of sampled requests: queue, process, batch.wait, infer, send.

An unsampled request builds none of them; a batch's `infer` span exists when at least one
of its requests is sampled, and links to each of those.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aiokafka import ConsumerRecord
from aiokafka.structs import RecordMetadata
from opentelemetry import trace
from opentelemetry.trace import Span

from tracing.attributes import RequestAttrs
from tracing.kafka import (
    end_send,
    infer_span,
    kafka_timestamp_ns,
    record_error,
    start_process_span,
    start_send_span,
    timed_span,
)
from tracing.sampling import TraceRef


def traceparent_of(span: Span) -> bytes:
    """The W3C header that makes the next hop a child of `span`."""
    context = span.get_span_context()
    flags = "01" if context.trace_flags.sampled else "00"
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{flags}".encode()


class RequestSpans:
    """One sampled request's spans in this worker, from its poll to its result's ack."""

    def __init__(self, process: Span, attrs: RequestAttrs) -> None:
        self.process = process
        self.attrs = attrs
        self.send: Span | None = None

    @classmethod
    def start(
        cls,
        record: ConsumerRecord[bytes, bytes],
        parent: TraceRef,
        *,
        group: str,
        attrs: RequestAttrs,
        polled_ns: int,
    ) -> RequestSpans:
        context = trace.set_span_in_context(parent.parent())
        # The poll: the same reading as the result's queue_ms; processing starts there.
        timed_span(
            "queue",
            start_ns=kafka_timestamp_ns(record.timestamp),
            end_ns=polled_ns,
            stage="queue",
            parent=context,
            request=attrs,
        )
        process = start_process_span(
            record.topic,
            group=group,
            partition=record.partition,
            offset=record.offset,
            key=record.key,
            context=context,
            request=attrs,
            start_ns=polled_ns,
        )
        return cls(process, attrs)

    def dispatched(self, *, polled_ns: int, dispatch_ns: int, size: int, batch_id: str) -> None:
        """`batch.wait`: from the poll to the engine taking the batch."""
        timed_span(
            "batch.wait",
            start_ns=polled_ns,
            end_ns=dispatch_ns,
            stage="batch_wait",
            parent=self.process,
            request=RequestAttrs(
                **{**_fields(self.attrs), "batch_size": size, "batch_id": batch_id}
            ),
        )

    def publishing(self, topic: str, key: str) -> bytes:
        """`send <reply topic>` opens; returns the traceparent the result carries."""
        self.send = start_send_span(
            topic, key=key, request=self.attrs, stage="publish", parent=self.process
        )
        return traceparent_of(self.send)

    def handed_over(self) -> None:
        """Its partition moved before it ran: this pass ends here, the next owner's begins."""
        self.process.set_attribute("inferbus.handed_over", True)
        self.process.end()

    def end(self, ack: RecordMetadata | BaseException, status: str) -> None:
        """The result was acked (or finally failed): close every open span."""
        if self.send is not None:
            end_send(self.send, ack)
        if status != "ok":
            record_error(self.process, status)
        self.process.end()


def _fields(attrs: RequestAttrs) -> dict[str, Any]:
    return {
        "model": attrs.model,
        "tier": attrs.tier,
        "model_version": attrs.model_version,
        "request_id": attrs.request_id,
        "provider": attrs.provider,
    }


def batch_spans(
    spans: Sequence[RequestSpans],
    shared: RequestAttrs,
    *,
    size: int,
    start_ns: int,
    steps_ms: Sequence[tuple[str, float]],
    failed: bool,
) -> None:
    """The batch's `infer` span linked to its sampled requests, with its engine steps."""
    if not spans:
        return
    with infer_span(
        [s.process for s in spans], request=shared, start_ns=start_ns, size=size
    ) as batch:
        cursor = start_ns
        for step, ms in steps_ms:
            end = cursor + int(ms * 1_000_000)
            batch.timed_step(step, start_ns=cursor, end_ns=end)  # type: ignore[arg-type]
            cursor = end
        if failed:
            record_error(batch.span, "engine_error")
