"""Kafka header names carried by inferbus events, and helpers to read them."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Literal

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
CONTENT_TYPE = "content-type"
PREFIX = "inferbus-"
"""Every header inferbus writes starts with it."""
SCHEMA = "inferbus-schema"
TIER = "inferbus-tier"
DEADLINE = "inferbus-deadline"
"""Absolute deadline, epoch milliseconds."""
PRODUCED_AT = "inferbus-produced-ms"
"""When the request first reached inferbus (the ingest record's timestamp), epoch ms."""
INGEST_MS = "inferbus-ingest-ms"
"""How long ingest took for this request, milliseconds."""
ERROR_CODE = "inferbus-error"
ERROR_MESSAGE = "inferbus-error-message"
SOURCE_TOPIC = "inferbus-source-topic"
SOURCE_PARTITION = "inferbus-source-partition"
SOURCE_OFFSET = "inferbus-source-offset"
VALUE_DROPPED = "inferbus-value-dropped"
"""On a DLQ record whose value the broker refused as too large (sent empty): why."""
VALUE_BYTES = "inferbus-value-bytes"
"""The dropped value's size, bytes."""
VALUE_SHA256 = "inferbus-value-sha256"
"""The dropped value's sha256, hex: what matches the record with the producer's copy."""

JSON = b"application/json"
REQUEST_SCHEMA_V1 = b"inferbus.InferenceRequest.v1"
RESULT_SCHEMA_V1 = b"inferbus.InferenceResult.v1"

Headers = list[tuple[str, bytes]]


def header(headers: Sequence[tuple[str, bytes]] | None, name: str) -> str | None:
    """The last value of a header as text, or None."""
    value: str | None = None
    for key, raw in headers or ():
        if key == name and raw is not None:
            value = raw.decode("utf-8", "replace")
    return value


def header_float(headers: Sequence[tuple[str, bytes]] | None, name: str) -> float | None:
    """A numeric header, or None when it is absent or not a number."""
    text = header(headers, name)
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        return None


def encode(pairs: Iterable[tuple[str, str | bytes | float | int]]) -> Headers:
    """Headers as Kafka wants them: (str, bytes)."""
    out: Headers = []
    for key, value in pairs:
        raw = value if isinstance(value, bytes) else str(value).encode()
        out.append((key, raw))
    return out


DeadLetterCode = Literal["unparseable", "undeliverable", "internal_error"]
"""Why a record is in the DLQ: it names no request to answer; its answer could not be sent;
or a service failed while handling it (a defect: the message says what raised)."""


def dead_letter(
    reason: str,
    *,
    topic: str,
    partition: int,
    offset: int,
    code: DeadLetterCode = "unparseable",
    original: Sequence[tuple[str, bytes | None]] = (),
) -> Headers:
    """Headers of a DLQ record: the original record's own (its content type, trace and
    whatever its producer set, for a tool that replays it), then why it could not be
    answered and where it came from. An original `inferbus-*` header is left out: the
    DLQ's own say what happened."""
    kept = [(k, v or b"") for k, v in original if not k.startswith(PREFIX)]
    return kept + encode(
        [
            (ERROR_CODE, code),
            (ERROR_MESSAGE, reason[:1000]),
            (SOURCE_TOPIC, topic),
            (SOURCE_PARTITION, partition),
            (SOURCE_OFFSET, offset),
        ]
    )
