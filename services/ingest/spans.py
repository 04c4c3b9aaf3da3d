"""The spans of one sampled request in ingest: `process inferbus.ingest*`, then `send <tier>`."""

from __future__ import annotations

from aiokafka import ConsumerRecord
from aiokafka.structs import RecordMetadata
from opentelemetry import trace
from opentelemetry.trace import Span

from schemas.topics import INGEST_GROUP
from tracing.attributes import RequestAttrs
from tracing.kafka import end_send, record_error, start_process_span, start_send_span
from tracing.sampling import TraceRef


class IngestSpans:
    """Open from the poll until the outcome's ack; only sampled requests get one."""

    def __init__(self, process: Span) -> None:
        self.process = process
        self.send: Span | None = None

    @classmethod
    def start(cls, record: ConsumerRecord[bytes, bytes], parent: TraceRef) -> IngestSpans:
        return cls(
            start_process_span(
                record.topic,
                group=INGEST_GROUP,
                partition=record.partition,
                offset=record.offset,
                key=record.key,
                context=trace.set_span_in_context(parent.parent()),
                stage="ingest",
            )
        )

    def routed(self, topic: str, key: bytes, request: RequestAttrs) -> None:
        """The request goes on to its tier topic: `send <topic>` under the process span."""
        self.process.set_attributes(request.as_attributes())
        self.send = start_send_span(topic, key=key, request=request, parent=self.process)

    def failed(self, status: str) -> None:
        """Answered with an error status, or dead-lettered (`unparseable`)."""
        record_error(self.process, status)

    def traceparent(self) -> bytes:
        """The header that makes the next hop a child of this one."""
        context = (self.send or self.process).get_span_context()
        flags = "01" if context.trace_flags.sampled else "00"
        return f"00-{context.trace_id:032x}-{context.span_id:016x}-{flags}".encode()

    def end(self, ack: RecordMetadata | BaseException) -> None:
        """The outcome was acked (or finally failed)."""
        if self.send is not None:
            end_send(self.send, ack)
        if isinstance(ack, BaseException):
            record_error(self.process, ack)
        self.process.end()
