"""Which requests are traced, decided once per request without building a span.

Ingest decides for every request: a producer's `traceparent` wins (its sampled flag is
honoured); without one, a new trace is sampled with the configured ratio, by trace id as
OpenTelemetry's TraceIdRatioBased does. The decision travels in the routed record's
`traceparent`, so the worker and the client agree with ingest without deciding again.
Only sampled requests build spans: an unsampled one costs a header, not a span.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from schemas.headers import TRACEPARENT

_MAX_TRACE_ID = (1 << 64) - 1
_random = random.Random()


@dataclass(frozen=True, slots=True)
class TraceRef:
    """A request's trace: its ids and whether it is sampled."""

    trace_id: int
    span_id: int
    sampled: bool

    @property
    def header(self) -> bytes:
        """The W3C `traceparent` value."""
        flags = "01" if self.sampled else "00"
        return f"00-{self.trace_id:032x}-{self.span_id:016x}-{flags}".encode()

    def span_context(self) -> SpanContext:
        """As a remote parent for OpenTelemetry spans."""
        return SpanContext(
            self.trace_id,
            self.span_id,
            is_remote=True,
            trace_flags=TraceFlags(TraceFlags.SAMPLED if self.sampled else TraceFlags.DEFAULT),
        )

    def parent(self) -> NonRecordingSpan:
        return NonRecordingSpan(self.span_context())


def parse_traceparent(value: bytes | str) -> TraceRef | None:
    """A valid version-00 `traceparent`, or None (a malformed one starts a new trace)."""
    text = value.decode("ascii", "replace") if isinstance(value, bytes) else value
    parts = text.strip().split("-")
    if len(parts) < 4 or len(parts[0]) != 2 or parts[0] == "ff":
        return None
    version, trace_hex, span_hex, flags_hex = parts[:4]
    if len(trace_hex) != 32 or len(span_hex) != 16 or len(flags_hex) != 2:
        return None
    if version == "00" and len(parts) != 4:
        return None
    try:
        trace_id, span_id, flags = int(trace_hex, 16), int(span_hex, 16), int(flags_hex, 16)
    except ValueError:
        return None
    if trace_id == 0 or span_id == 0:
        return None
    return TraceRef(trace_id, span_id, bool(flags & 0x01))


def read_traceparent(headers: Sequence[tuple[str, bytes]] | None) -> TraceRef | None:
    """The record's trace, from its last `traceparent` header."""
    found: bytes | None = None
    for key, value in headers or ():
        if key == TRACEPARENT and value:
            found = value
    return parse_traceparent(found) if found is not None else None


def new_trace(ratio: float) -> TraceRef:
    """A fresh root, sampled with probability `ratio` (by its trace id's low 64 bits)."""
    trace_id = _random.getrandbits(128) or 1
    span_id = _random.getrandbits(64) or 1
    bound = round(ratio * (_MAX_TRACE_ID + 1))
    return TraceRef(trace_id, span_id, (trace_id & _MAX_TRACE_ID) < bound)
