"""One fetch from given offsets, for reading what a broker's offsets do not say.

Tansu 0.6 answers ListOffsets(latest) with the last batch's first offset + 1, short of the
log's true end when that batch holds many records; a fetch from there returns the whole
batch and so its last offset. Used by the scaler's collector (lag) and by consumers that
must tell a position inside the last batch from one past the log (a broker restart). On
Apache Kafka the reported end is the true one and the read changes nothing.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from aiokafka import ConsumerRecord, TopicPartition


async def fetch_once(
    consumer: Any, start_at: Mapping[TopicPartition, int], timeout_s: float
) -> dict[TopicPartition, list[ConsumerRecord[bytes, bytes]]]:
    """The records of one fetch from each partition's `start_at` offset (absent: none came
    within `timeout_s`). Assigns `consumer` to those partitions and drops the assignment
    again, so that its fetcher does not go on prefetching."""
    if not start_at:
        return {}
    consumer.assign(list(start_at))
    try:
        for tp, offset in start_at.items():
            consumer.seek(tp, offset)
        found: dict[TopicPartition, list[ConsumerRecord[bytes, bytes]]] = {}
        deadline = time.monotonic() + timeout_s
        while len(found) < len(start_at):
            left_ms = int((deadline - time.monotonic()) * 1000)
            if left_ms <= 0:
                break
            waiting = [tp for tp in start_at if tp not in found]
            batch = await consumer.getmany(*waiting, timeout_ms=left_ms)
            for tp, records in batch.items():
                if records:
                    found[tp] = list(records)
        return found
    finally:
        consumer.unsubscribe()


def past_log_end(position: int, reported_end: int, highest_seen: int | None) -> bool:
    """Whether a position is past its log's true end: the broker reported `reported_end`,
    and a fetch from the last batch's first offset saw `highest_seen` (None: nothing came).

    A position past the reported end alone is normal on Tansu, which reports the last
    batch's first offset + 1; only the batch's own last offset tells. An empty log (end 0)
    needs no read. Nothing seen: not known, so not past."""
    if reported_end <= 0:
        return position > 0
    if highest_seen is None:
        return False
    return position > max(reported_end, highest_seen + 1)
