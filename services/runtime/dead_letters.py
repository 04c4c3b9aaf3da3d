"""DLQ records, and delivering them where there is no other place left to put a record."""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Sequence

from aiokafka import ConsumerRecord
from aiokafka.errors import MessageSizeTooLargeError

from schemas import headers as h
from schemas.topics import DLQ
from services.runtime.publisher import Outgoing, Publisher, error_text

log = logging.getLogger(__name__)


def dead_letter_of(
    record: ConsumerRecord[bytes, bytes], reason: str, *, code: h.DeadLetterCode
) -> Outgoing:
    """The DLQ record for a consumed record: its own key, bytes and headers, why, and where
    from."""
    headers = h.dead_letter(
        reason,
        topic=record.topic,
        partition=record.partition,
        offset=record.offset,
        code=code,
        original=record.headers,
    )
    return Outgoing(DLQ, record.key, record.value or b"", headers)


def undeliverable_result(
    key: bytes | None, result: bytes, reason: str, *, topic: str, partition: int, offset: int
) -> Outgoing:
    """The DLQ record of a result its reply topic would not take: the result itself, keyed
    by request id; the source headers name the request's record."""
    headers = h.dead_letter(
        reason, topic=topic, partition=partition, offset=offset, code="undeliverable"
    )
    return Outgoing(DLQ, key, result, headers)


async def deliver_until_taken(publisher: Publisher, records: Sequence[Outgoing]) -> None:
    """Produce `records` (DLQ records), retrying until the broker takes every one.

    Used where there is no other place left to put a record: when even this fails the
    broker is down (or lost the topic, which the services re-create), and nothing else
    moves either. Logs once per attempt with backoff up to 5 s: a bounded rate of lines.

    A record the broker refuses as too large goes once more without its value
    (`without_value`): a DLQ copy is the producer's bytes plus the error headers, and may be
    refused where the original was taken. Only a stub refused too is dropped, said loudly.
    """
    too_large = await _deliver_all_but_too_large(publisher, records)
    if len(too_large) > 1:  # a broker refuses a batch whole: each tries alone first
        too_large = await _deliver_each_alone(publisher, [record for record, _ in too_large])
    stubs = [without_value(record, error) for record, error in too_large]
    for stub, error in await _deliver_each_alone(publisher, stubs):
        log.error(
            "event=record_too_large_dropped topic=%s key=%r bytes=%s error=%r",
            stub.topic,
            stub.key,
            h.header(stub.headers, h.VALUE_BYTES),
            error_text(error),
        )


async def _deliver_all_but_too_large(
    publisher: Publisher, records: Sequence[Outgoing]
) -> list[tuple[Outgoing, MessageSizeTooLargeError]]:
    """Produce `records`, retrying until the broker takes every one it does not refuse as
    too large; those are returned with their error (trying again cannot help them)."""
    too_large: list[tuple[Outgoing, MessageSizeTooLargeError]] = []
    pending = list(records)
    attempt = 0
    while pending:
        results = await publisher.send_all(pending)
        left: list[Outgoing] = []
        errors: list[Exception] = []
        for record, result in zip(pending, results, strict=True):
            if isinstance(result, MessageSizeTooLargeError):
                too_large.append((record, result))
            elif isinstance(result, Exception):
                left.append(record)
                errors.append(result)
        pending = left
        if pending:
            attempt += 1
            # The error is named: a refusal that trying again cannot mend (an ACL on the
            # DLQ topic) holds its partition here, and the operator must see why.
            log.error(
                "event=dlq_unreachable left=%d attempt=%d topic=%s error=%r",
                len(pending),
                attempt,
                pending[0].topic,
                error_text(errors[0]),
            )
            await asyncio.sleep(min(0.5 * attempt, 5.0))
    return too_large


async def _deliver_each_alone(
    publisher: Publisher, records: Sequence[Outgoing]
) -> list[tuple[Outgoing, MessageSizeTooLargeError]]:
    """`_deliver_all_but_too_large`, each record in a call (a record batch) of its own: one
    refused as too large does not take the others with it."""
    refused = await asyncio.gather(
        *(_deliver_all_but_too_large(publisher, [record]) for record in records)
    )
    return [pair for one in refused for pair in one]


def without_value(record: Outgoing, error: BaseException) -> Outgoing:
    """`record` with an empty value, its key and headers kept, and headers that say why the
    value was dropped, how large it was and its sha256 (to match it with the producer's)."""
    dropped = h.encode(
        [
            (h.VALUE_DROPPED, error_text(error)[:1000]),
            (h.VALUE_BYTES, len(record.value)),
            (h.VALUE_SHA256, hashlib.sha256(record.value).hexdigest()),
        ]
    )
    return Outgoing(record.topic, record.key, b"", [*record.headers, *dropped])
