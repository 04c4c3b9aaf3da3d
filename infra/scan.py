"""Find records in a topic by reading it from its start: where (if anywhere) each of a
set of ids is. For after-the-fact accounting (benchmarks, chaos), never a hot path."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from aiokafka import ConsumerRecord, TopicPartition

from infra.kafka import make_consumer, start_with_retry


def record_key(record: ConsumerRecord[bytes, bytes]) -> str | None:
    """A record's key as text (the request id on the tier and result topics)."""
    return record.key.decode(errors="replace") if record.key else None


@dataclass(frozen=True)
class LogScan:
    """What a read of a topic from its start found."""

    found: dict[str, list[tuple[int, int]]]
    """id -> every (partition, offset) of a record whose id it is (empty: not in the log)."""
    shared: frozenset[tuple[int, int]]
    """(partition, offset)s the broker served two or more different records at. A reader
    that reads by offset sees only one of them: Tansu does this after a restart, when
    records sent to a topic it lost and records sent to the topic made again get the
    same offsets."""


async def scan_log(
    bootstrap: str,
    topic: str,
    ids: set[str],
    quiet_s: float = 3.0,
    most_s: float = 60.0,
    *,
    ident: Callable[[ConsumerRecord[bytes, bytes]], str | None] = record_key,
) -> LogScan:
    """Read `topic` from its start and say where each of `ids` is (`LogScan.found`, by
    `ident`), and which offsets held more than one record. Reads until no record came
    for `quiet_s` (or `most_s` in all)."""
    found: dict[str, list[tuple[int, int]]] = {i: [] for i in ids}
    held: dict[tuple[int, int], set[str | None]] = defaultdict(set)
    if not ids:
        return LogScan(found, frozenset())
    consumer = make_consumer(bootstrap=bootstrap, group_id=None, client_id="inferbus-log-scan")
    await start_with_retry(consumer.start, what="log-scan")
    try:
        await consumer.topics()
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        if not tps:
            return LogScan(found, frozenset())
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        started = last = time.monotonic()
        while time.monotonic() - last < quiet_s and time.monotonic() - started < most_s:
            batches = await consumer.getmany(timeout_ms=500)
            for tp, records in batches.items():
                last = time.monotonic()
                for record in records:
                    key = ident(record)
                    held[(tp.partition, record.offset)].add(key)
                    if key in found:
                        found[key].append((tp.partition, record.offset))
    finally:
        await consumer.stop()
    shared = frozenset(at for at, keys in held.items() if len(keys) > 1)
    return LogScan(found, shared)
