"""Under a backlog a poll takes from every partition with records buffered, not one
partition's fetched chunk after another (the overload fault of stop 35,
docs/reliability.md)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter

import pytest

from infra.kafka import make_producer
from infra.topics import ensure_topics, standard_topics
from tests.integration.lone_worker import lone_worker

pytestmark = pytest.mark.integration

PARTITIONS = 3
PER_PARTITION = 20


async def test_a_small_poll_is_shared_among_the_buffered_partitions(broker: str) -> None:
    model = f"fair-{uuid.uuid4().hex[:6]}"
    await ensure_topics(broker, standard_topics([model], tier_partitions=PARTITIONS))
    producer = make_producer(bootstrap=broker, client_id="fair-test")
    await producer.start()
    worker = lone_worker(broker, producer, model, client_id="fair-test", lease_s=60.0)
    consumer = worker.consumer
    try:
        for p in range(PARTITIONS):
            for i in range(PER_PARTITION):
                await producer.send(worker.topic, b"x", key=f"{p}-{i}".encode(), partition=p)
        await producer.flush()
        await worker.membership.publish("ready")
        await consumer.start()
        deadline = time.monotonic() + 20.0
        while len(consumer._buffered_data()) < PARTITIONS:
            assert time.monotonic() < deadline, "the partitions were never all fetched"
            await consumer.tend()
            await asyncio.sleep(0.05)

        polls = [await consumer.poll(timeout_ms=0, max_records=6) for _ in range(3)]

        for records in polls:
            assert Counter(r.partition for r in records) == {0: 2, 1: 2, 2: 2}
        for p in range(PARTITIONS):  # each partition's records still come in order
            offsets = [r.offset for records in polls for r in records if r.partition == p]
            assert offsets == sorted(offsets)
    finally:
        await asyncio.gather(consumer.close(), producer.stop(), return_exceptions=True)
