"""A partition taken at a committed offset past its log's end is read from its beginning.

Seen live over a broker restart: a commit retried across the restart wrote the old log's
offset (55) to the fresh broker, whose new log ended at 10; the worker that took the
partition read on from 55 and its first 10 requests were never answered."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from infra.kafka import make_producer
from infra.topics import ensure_topics, standard_topics
from services.runtime.committer import Committer
from services.runtime.consumer import ConsumerOptions
from tests.integration.lone_worker import lone_worker

pytestmark = pytest.mark.integration

RECORDS = 10
STALE_OFFSET = 55
BRISK_CHECK = ConsumerOptions(position_check_s=0.5)
"""Positions are checked against the logs' ends every 0.5 s, not the default."""


async def test_a_committed_offset_past_the_end_reads_the_log_from_its_beginning(
    broker: str,
) -> None:
    model = f"stale-{uuid.uuid4().hex[:6]}"
    await ensure_topics(broker, standard_topics([model], tier_partitions=1))
    producer = make_producer(bootstrap=broker, client_id="stale-test")
    await producer.start()
    worker = lone_worker(broker, producer, model, client_id="stale-test", options=BRISK_CHECK)
    topic, membership, consumer = worker.topic, worker.membership, worker.consumer
    committer = Committer(broker, group=worker.group, topic=topic, client_id="stale-test-old-life")
    try:
        for i in range(RECORDS):
            await producer.send_and_wait(topic, b"x", key=f"r{i}".encode(), partition=0)
        await committer.start(1)
        await committer.commit({0: STALE_OFFSET})
        await membership.publish("ready")
        await consumer.start()
        keys: set[bytes] = set()
        deadline = time.monotonic() + 20.0
        while len(keys) < RECORDS and time.monotonic() < deadline:
            keys.update(r.key or b"" for r in await consumer.poll(timeout_ms=200))
        assert keys == {f"r{i}".encode() for i in range(RECORDS)}
    finally:
        await asyncio.gather(consumer.close(), committer.stop(), producer.stop())


async def test_a_position_inside_the_last_batch_of_many_is_not_read_again(broker: str) -> None:
    """Tansu reports a log's end as its last batch's first offset + 1: a reader at the true
    end of a batch of many is past the reported end, and must not read the log again (a
    first version of the check above did, and `bench scale-step` replayed 80,259 answers)."""
    model = f"batch-{uuid.uuid4().hex[:6]}"
    await ensure_topics(broker, standard_topics([model], tier_partitions=1))
    producer = make_producer(bootstrap=broker, client_id="batch-test", linger_ms=50)
    await producer.start()
    worker = lone_worker(broker, producer, model, client_id="batch-test", options=BRISK_CHECK)
    topic, membership, consumer = worker.topic, worker.membership, worker.consumer
    try:
        sent = [
            await producer.send(topic, b"x", key=f"r{i}".encode(), partition=0)
            for i in range(RECORDS)
        ]
        await asyncio.gather(*sent)  # one batch: the broker reports its end as 1
        await membership.publish("ready")
        await consumer.start()
        keys: list[bytes] = []
        deadline = time.monotonic() + 20.0
        while len(keys) < RECORDS and time.monotonic() < deadline:
            keys += [r.key or b"" for r in await consumer.poll(timeout_ms=200)]
        assert len(keys) == RECORDS
        quiet_until = time.monotonic() + 3.0  # six position checks with nothing delivered
        while time.monotonic() < quiet_until:
            keys += [r.key or b"" for r in await consumer.poll(timeout_ms=200)]
        assert len(keys) == RECORDS, "the log was read again"
    finally:
        await asyncio.gather(consumer.close(), producer.stop())
