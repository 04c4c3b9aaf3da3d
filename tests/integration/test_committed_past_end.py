"""A partition taken at a committed offset past its log's end is read from its beginning.

Seen live over a broker restart: a commit retried across the restart wrote the old log's
offset (55) to the fresh broker, whose new log ended at 10; the worker that took the
partition read on from 55 and its first 10 requests were never answered."""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import UTC, datetime

import pytest

from infra.kafka import make_producer
from infra.topics import ensure_topics, standard_topics
from schemas.topics import request_topic, worker_group
from services.runtime.committer import Committer
from services.runtime.consumer import ConsumerOptions, OwnedConsumer
from services.runtime.membership import Identity, Membership
from services.runtime.offsets import OffsetTracker

pytestmark = pytest.mark.integration

RECORDS = 10
STALE_OFFSET = 55


async def test_a_committed_offset_past_the_end_reads_the_log_from_its_beginning(
    broker: str,
) -> None:
    model = f"stale-{uuid.uuid4().hex[:6]}"
    topic, group = request_topic(model, "interactive"), worker_group(model, "interactive")
    await ensure_topics(broker, standard_topics([model], tier_partitions=1))
    producer = make_producer(bootstrap=broker, client_id="stale-test")
    await producer.start()
    committer = Committer(broker, group=group, topic=topic, client_id="stale-test-old-life")

    async def send(topic_: str, key: bytes, value: bytes) -> None:
        await producer.send_and_wait(topic_, value, key=key)

    identity = Identity("me", "inferbus-worker", model, ["interactive"], [group], datetime.now(UTC))
    membership = Membership(send, identity, lease_s=30.0)
    membership.state = "ready"

    async def drain(topic_: str, partitions: frozenset[int]) -> None:
        return None

    consumer = OwnedConsumer(
        broker,
        client_id="stale-test",
        membership=membership,
        groups=[(group, topic)],
        offsets=OffsetTracker(),
        drain=drain,
        options=ConsumerOptions(position_check_s=0.5),
    )
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
    topic, group = request_topic(model, "interactive"), worker_group(model, "interactive")
    await ensure_topics(broker, standard_topics([model], tier_partitions=1))
    producer = make_producer(bootstrap=broker, client_id="batch-test", linger_ms=50)
    await producer.start()

    async def send(topic_: str, key: bytes, value: bytes) -> None:
        await producer.send_and_wait(topic_, value, key=key)

    identity = Identity("me", "inferbus-worker", model, ["interactive"], [group], datetime.now(UTC))
    membership = Membership(send, identity, lease_s=30.0)
    membership.state = "ready"

    async def drain(topic_: str, partitions: frozenset[int]) -> None:
        return None

    consumer = OwnedConsumer(
        broker,
        client_id="batch-test",
        membership=membership,
        groups=[(group, topic)],
        offsets=OffsetTracker(),
        drain=drain,
        options=ConsumerOptions(position_check_s=0.5),
    )
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
