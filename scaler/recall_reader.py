"""Reads the scaler's own recent decision records back from Kafka, for `recall.py`.

From the first record written at or after `since` to the log's end as it was when the
read began. The start is the broker's offset for that time (ListOffsets by timestamp), at
most `most` records before the end: Tansu 0.6 answers its log's first offset for any time
(and a time of its own, not the record's, so the answer cannot be checked). What is older
than `since` is left out by the records' own times (`recall.py`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from infra.kafka import make_consumer, start_with_retry
from infra.log_end import log_spans
from scaler.recall import Unreadable
from schemas.topics import DECISIONS

log = logging.getLogger("inferbus.scaler.recall")

_POLL_MS = 500


@dataclass(frozen=True)
class ReadBack:
    """Decision records read back, parsed as JSON (one with no JSON, a tombstone included, is
    an `Unreadable`, which `recall.recorded` counts by its reason), and whether the read
    reached the log's end as it was at the start (on Tansu, the end a 1 s fetch of the last
    batch showed: `infra.log_end.log_spans`)."""

    records: list[Any]
    complete: bool


def start_offset(found: int | None, *, first: int, end: int, most: int) -> int:
    """Where to start reading: `found`, the broker's offset for the replay's start, but no
    more than `most` records before `end` (Tansu 0.6 answers the log's first offset for any
    time), and never before `first`. None, Kafka's answer for a time after the log's last
    record: nothing to read."""
    if found is None:
        return end
    return min(end, max(first, found, end - most))


async def read_decisions(
    bootstrap: str, *, since: float, most: int, timeout_s: float, topic: str = DECISIONS
) -> ReadBack:
    """The decision records written since `since` (wall-clock s), at most `most` of them
    per partition; stops at `timeout_s` with what it has (`complete` False). Finding where
    to start (connecting, the log's ends, the offset for the time) that takes longer than
    `timeout_s` raises TimeoutError: nothing was read."""
    consumer = make_consumer(
        bootstrap=bootstrap,
        group_id=None,
        client_id="inferbus-scaler-recall",
        request_timeout_ms=max(1000, int(timeout_s * 1000)),
    )
    deadline = time.monotonic() + timeout_s
    try:
        async with asyncio.timeout(timeout_s + _POLL_MS / 1000):
            await start_with_retry(consumer.start, what="scaler-recall")
            return await _read(consumer, topic, since, most, deadline)
    finally:
        await consumer.stop()


async def _read(
    consumer: AIOKafkaConsumer, topic: str, since: float, most: int, deadline: float
) -> ReadBack:
    await consumer.topics()
    partitions = sorted(consumer.partitions_for_topic(topic) or ())
    tps = [TopicPartition(topic, p) for p in partitions]
    if not tps:
        return ReadBack([], complete=True)
    spans = await log_spans(consumer, tps)
    since_ms = int(since * 1000)
    found = await consumer.offsets_for_times(dict.fromkeys(tps, since_ms))
    starts: dict[TopicPartition, int] = {}
    for tp in tps:
        first, end = spans[tp]
        hit = found.get(tp)
        start = start_offset(
            None if hit is None else hit.offset,
            first=first,
            end=end,
            most=most,
        )
        if start < end:
            starts[tp] = start
    if not starts:
        return ReadBack([], complete=True)
    consumer.assign(list(starts))
    for tp, offset in starts.items():
        consumer.seek(tp, offset)
    records: list[Any] = []
    left = dict(starts)
    while left:
        wait_ms = min(_POLL_MS, int((deadline - time.monotonic()) * 1000))
        if wait_ms <= 0:
            log.warning(
                "event=recall_read_cut_short read=%d partitions_left=%d", len(records), len(left)
            )
            return ReadBack(records, complete=False)
        batches = await consumer.getmany(*left, timeout_ms=wait_ms)
        for tp, got in batches.items():
            records.extend(decoded(r.value) for r in got if r.offset < spans[tp][1])
        # By position, not by the last record's offset: a log may end in offsets with no
        # record to deliver (transaction markers on Kafka).
        for tp in list(left):
            if await consumer.position(tp) >= spans[tp][1]:
                del left[tp]
    return ReadBack(records, complete=True)


def decoded(value: bytes | None) -> Any:
    """The record's JSON, or why it has none (`recall.recorded` counts it by that)."""
    if value is None:
        return Unreadable("no value (a tombstone)")
    try:
        return json.loads(value)
    except (ValueError, RecursionError):  # UnicodeDecodeError included; nested past the stack
        return Unreadable("not JSON")
