"""Requests left on a tier topic that no worker will read: each gets an error result.

A group retires when its model leaves the repository (or its tier leaves the model.yaml).
Its workers answer what is queued before they stop; but when none is left, and none can
start, what is still queued used to get no answer at all, and its clients waited out their
own timeouts. `answer_orphans` reads those records under the group's id, answers each one
with an error result on its reply topic (or dead-letters it when it names no request), and
commits the group's offsets past them, so the group's lag, and the scaler's count of the
unanswered, falls to 0.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from opentelemetry import trace

from infra.kafka import committed_offsets, make_consumer, start_with_retry
from infra.lenient_fetch import unreadable_reason
from infra.log_end import log_spans
from infra.topics import partition_count
from schemas import headers as h
from schemas.errors import InferbusError, Unparseable
from schemas.parse import salvage_event, split_event
from schemas.result import Status
from schemas.topics import DLQ
from services.runtime.dead_letters import (
    dead_letter_of,
    deliver_until_taken,
    undeliverable_result,
)
from services.runtime.publisher import Outgoing, Publisher, error_text
from services.runtime.result_wire import OutputForm, encode_result, result_headers
from tracing import attributes as attr
from tracing.kafka import extract, inject, process_span, record_error
from tracing.sampling import read_traceparent
from tracing.setup import tracing_enabled

log = logging.getLogger(__name__)

CHUNK_RECORDS = 500
"""Records answered, then committed, at a time: a long queue shows its progress, and a
sweep cut short (the broker away, the scaler stopped) answers at most this many twice
when it runs again (at least once, as everywhere in inferbus)."""

POLL_MS = 500
"""How long one fetch waits for records (the sweep reads up to the end it found at start)."""

STALL_S = 30.0
"""A sweep that reads nothing for this long before the ends it found fails (`SweepStalled`)
instead of waiting for ever: the topic was deleted, or the broker lost its log."""


class SweepStalled(InferbusError):
    """No record came for `STALL_S` while records were still due (said, retried later)."""


@dataclass(frozen=True, slots=True)
class SweepCounts:
    """How many records one sweep answered and dead-lettered."""

    answered: int
    """Error results the reply topics took."""
    dead_lettered: int
    """Records that named no request to answer, and answers no reply topic would take
    (each in the DLQ, saying why)."""

    @property
    def total(self) -> int:
        return self.answered + self.dead_lettered

    def __add__(self, other: SweepCounts) -> SweepCounts:
        return SweepCounts(self.answered + other.answered, self.dead_lettered + other.dead_lettered)


def orphan_answer(
    record: ConsumerRecord[bytes, bytes], *, status: Status, why: str, now_ms: float
) -> Outgoing:
    """The answer to one record no worker will read: an error result on its reply topic,
    in the form the request came in, with its trace context; or its DLQ record when it
    names no request (the DLQ keeps its bytes and says why)."""
    if record.value is None and (lost := unreadable_reason(record.headers)) is not None:
        return dead_letter_of(
            record, f"{why}; and the record was unreadable: {lost}", code="unparseable"
        )
    try:
        envelope, payload = split_event(record.value)
        where = salvage_event(envelope, payload)
    except Unparseable as exc:
        return dead_letter_of(
            record, f"{why}; and it names no request to answer: {exc}", code="unparseable"
        )
    form: OutputForm = "frame" if where.framed else "list"
    origin_ms = h.header_float(record.headers, h.PRODUCED_AT) or float(record.timestamp)
    value = encode_result(
        request_id=where.request_id,
        model=where.model,
        status=status,
        form=form,
        error=f"{why}: no worker is left to serve {record.topic}, where this request waited",
        timings={
            "queue_ms": max(now_ms - record.timestamp, 0.0),
            "e2e_ms": max(now_ms - origin_ms, 0.0),
        },
        tenant=where.tenant,
        completed_at=datetime.fromtimestamp(now_ms / 1000, UTC).isoformat(),
    )
    headers = result_headers(form)
    headers += [(k, v) for k, v in record.headers or () if k in (h.TRACEPARENT, h.TRACESTATE) and v]
    return Outgoing(where.reply_to, where.request_id.encode(), value, headers)


def traced(
    record: ConsumerRecord[bytes, bytes], answer: Outgoing, *, group: str, status: Status, why: str
) -> Outgoing:
    """`answer`, sent from a failed `process <topic>` span in the request's own trace when
    that trace is sampled and spans are exported: Jaeger shows who answered it, and why,
    where a worker's spans would be. (A span nobody exports would leave the result's
    trace hanging from a parent Jaeger never gets.)"""
    parent = read_traceparent(record.headers)
    if parent is None or not parent.sampled or not tracing_enabled():
        return answer
    with process_span(
        record.topic,
        group=group,
        partition=record.partition,
        offset=record.offset,
        key=record.key,
        context=extract(record.headers),
    ) as span:
        record_error(span, status, message=f"answered by the scaler: {why}")
        if answer.key is not None:  # searchable in Jaeger by the request's id, as a worker's
            span.set_attribute(attr.REQUEST_ID, answer.key.decode(errors="replace"))
        headers = [(k, v) for k, v in answer.headers if k not in (h.TRACEPARENT, h.TRACESTATE)]
        inject(headers, trace.set_span_in_context(span))
    return Outgoing(answer.topic, answer.key, answer.value, headers)


async def answer_orphans(
    bootstrap: str,
    publisher: Publisher,
    *,
    group: str,
    topic: str,
    status: Status,
    why: str,
    progress: Callable[[SweepCounts], None] | None = None,
    clock: Callable[[], float] = time.time,
) -> SweepCounts:
    """Answer every record of `topic` past `group`'s committed offsets, up to the end found
    at the start, chunk by chunk (`orphan_answer`), committing under `group` after each.

    Only for a group that no worker consumes: a live one's commits and these would race.
    Records produced meanwhile are left to the next call. A partition whose committed
    offset is past its end (a topic re-created) is left alone; one whose committed records
    are gone (retention) starts at its first record. A sweep cancelled between a chunk's
    answers and its commit answers that chunk again when it runs again (at least once).
    Raises `SweepStalled` when nothing comes for `STALL_S` before the ends.
    """
    consumer = await _group_consumer(bootstrap, group)
    try:
        spans = await _spans_to_answer(consumer, bootstrap, topic)
        consumer.assign(list(spans))
        for tp, (start, _) in spans.items():
            consumer.seek(tp, start)
        left = {tp: end for tp, (_, end) in spans.items()}
        done = SweepCounts(0, 0)
        last_read = time.monotonic()
        while left:
            batch, finished = await _chunk(consumer, left)
            if batch:
                last_read = time.monotonic()
                done = done + await _answer(
                    publisher, batch, group=group, status=status, why=why, now_ms=clock() * 1000
                )
            # A finished partition is committed to its end, past any offsets its log
            # skips (a gap, a batch no reader can read): its lag then reads 0.
            offsets = {**_next_offsets(batch), **finished}
            if offsets:
                await consumer.commit(offsets)
            if batch and progress is not None:
                progress(done)
            elif not batch and left and time.monotonic() - last_read > STALL_S:
                raise SweepStalled(
                    f"nothing read from {topic} for {STALL_S:.0f} s before the end of "
                    f"partitions {sorted(tp.partition for tp in left)}: was it deleted, or "
                    "its log lost?",
                    group=group,
                )
        return done
    finally:
        await consumer.stop()


async def unanswered(bootstrap: str, *, group: str, topic: str) -> int:
    """How many records of `topic` lie past `group`'s committed offsets (what
    `answer_orphans` would answer now)."""
    consumer = await _group_consumer(bootstrap, group)
    try:
        spans = await _spans_to_answer(consumer, bootstrap, topic)
        return sum(end - start for start, end in spans.values())
    finally:
        await consumer.stop()


async def _group_consumer(bootstrap: str, group: str) -> AIOKafkaConsumer:
    consumer = make_consumer(bootstrap=bootstrap, group_id=group, client_id="inferbus-orphans")
    await start_with_retry(consumer.start, what=f"orphans-{group}")
    return consumer


async def _spans_to_answer(
    consumer: AIOKafkaConsumer, bootstrap: str, topic: str
) -> dict[TopicPartition, tuple[int, int]]:
    """Partition -> (first offset to answer, end), for each partition with records left."""
    partitions = await partition_count(bootstrap, topic)
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    if not tps:
        return {}
    committed = await committed_offsets(consumer, tps)
    logs = await log_spans(consumer, tps)  # Tansu reports less when the last batch has many
    spans: dict[TopicPartition, tuple[int, int]] = {}
    for tp, (first, end) in logs.items():
        at = committed[tp]
        start = first if at is None else max(at, first)
        if start < end:
            spans[tp] = (start, end)
    return spans


async def _chunk(
    consumer: AIOKafkaConsumer, left: dict[TopicPartition, int]
) -> tuple[list[ConsumerRecord[bytes, bytes]], dict[TopicPartition, int]]:
    """Up to `CHUNK_RECORDS` records before the ends in `left`, and the partitions read to
    their ends now, with those ends: they leave `left` and are paused, so nothing produced
    after the start is fetched."""
    got = await consumer.getmany(*left, timeout_ms=POLL_MS, max_records=CHUNK_RECORDS)
    batch = [r for tp, records in got.items() for r in records if r.offset < left[tp]]
    finished: dict[TopicPartition, int] = {}
    for tp in list(left):
        if await consumer.position(tp) >= left[tp]:
            finished[tp] = left.pop(tp)
            consumer.pause(tp)
    return batch, finished


def _next_offsets(
    batch: Sequence[ConsumerRecord[bytes, bytes]],
) -> dict[TopicPartition, int]:
    """Per partition, the offset after the last of its records in `batch`."""
    out: dict[TopicPartition, int] = {}
    for record in batch:
        tp = TopicPartition(record.topic, record.partition)
        out[tp] = max(out.get(tp, 0), record.offset + 1)
    return out


async def _answer(
    publisher: Publisher,
    batch: Sequence[ConsumerRecord[bytes, bytes]],
    *,
    group: str,
    status: Status,
    why: str,
    now_ms: float,
) -> SweepCounts:
    """Each record's `orphan_answer` sent; an answer its reply topic would not take goes to
    the DLQ instead, with the DLQ records, retried until taken."""
    answers: list[tuple[ConsumerRecord[bytes, bytes], Outgoing]] = []
    dead: list[Outgoing] = []
    for record in batch:
        out = orphan_answer(record, status=status, why=why, now_ms=now_ms)
        if out.topic == DLQ:
            dead.append(out)
        else:
            answers.append((record, traced(record, out, group=group, status=status, why=why)))
    acks = await publisher.send_all([answer for _, answer in answers])
    refused = 0
    for (record, answer), ack in zip(answers, acks, strict=True):
        if not isinstance(ack, BaseException):
            continue
        refused += 1
        reason = f"could not deliver the result to {answer.topic}: {error_text(ack)}"
        if refused == 1:  # one line a chunk: a deleted reply topic refuses them all
            log.error("event=orphans_undeliverable key=%r reason=%r", answer.key, reason)
        dead.append(
            undeliverable_result(
                answer.key,
                answer.value,
                reason,
                topic=record.topic,
                partition=record.partition,
                offset=record.offset,
            )
        )
    if refused > 1:
        log.error("event=orphans_undeliverable count=%d (each in the DLQ)", refused)
    if dead:
        await deliver_until_taken(publisher, dead)
    return SweepCounts(answered=len(answers) - refused, dead_lettered=len(dead))
