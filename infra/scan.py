"""Find records in a topic by reading it from its start: where (if anywhere) each of a
set of ids is. For after-the-fact accounting (benchmarks, chaos), never a hot path."""

from __future__ import annotations

import time
from collections.abc import Callable

from aiokafka import ConsumerRecord, TopicPartition

from infra.kafka import make_consumer, start_with_retry


def record_key(record: ConsumerRecord[bytes, bytes]) -> str | None:
    """A record's key as text (the request id on the tier and result topics)."""
    return record.key.decode(errors="replace") if record.key else None


async def find_in_log(
    bootstrap: str,
    topic: str,
    ids: set[str],
    quiet_s: float = 3.0,
    most_s: float = 60.0,
    *,
    ident: Callable[[ConsumerRecord[bytes, bytes]], str | None] = record_key,
) -> dict[str, list[tuple[int, int]]]:
    """Read `topic` from its start and say where each of `ids` is: id -> every
    (partition, offset) of a record whose `ident` it is (empty: not in the log). Reads
    until no record came for `quiet_s` (or `most_s` in all)."""
    found: dict[str, list[tuple[int, int]]] = {i: [] for i in ids}
    if not ids:
        return found
    consumer = make_consumer(bootstrap=bootstrap, group_id=None, client_id="inferbus-log-scan")
    await start_with_retry(consumer.start, what="log-scan")
    try:
        await consumer.topics()
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        if not tps:
            return found
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        started = last = time.monotonic()
        while time.monotonic() - last < quiet_s and time.monotonic() - started < most_s:
            batches = await consumer.getmany(timeout_ms=500)
            for tp, records in batches.items():
                last = time.monotonic()
                for record in records:
                    key = ident(record)
                    if key in found:
                        found[key].append((tp.partition, record.offset))
    finally:
        await consumer.stop()
    return found
