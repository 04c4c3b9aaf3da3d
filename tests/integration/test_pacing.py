"""aiokafka's own fetcher builds each fetch with the pacer's live wait, and a held
consumer still gets its records."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from aiokafka import TopicPartition

from infra.kafka import make_consumer, make_producer
from infra.pacing import FetchPacer
from infra.topics import TopicSpec, ensure_topics

pytestmark = pytest.mark.integration


async def test_a_held_consumer_fetches_with_the_live_wait(broker: str) -> None:
    topic = f"pacing-{uuid.uuid4().hex[:8]}"
    await ensure_topics(broker, [TopicSpec(topic, 1)])
    tp = TopicPartition(topic, 0)
    consumer = make_consumer(bootstrap=broker, group_id=None, client_id="pacing")
    producer = make_producer(bootstrap=broker, client_id="pacing")
    await consumer.start()
    await producer.start()
    try:
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        pacer = FetchPacer(consumer)
        assert pacer.attach()
        fetcher = consumer._fetcher
        assert fetcher._fetch_max_wait_ms == pacer.wait_ms
        pacer.hold_until(time.monotonic() + 0.15)
        assert 100 <= fetcher._fetch_max_wait_ms <= 145
        await producer.send_and_wait(topic, b"held", partition=0)
        got: list[bytes] = []
        deadline = time.monotonic() + 5.0
        while not got and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=500)
            got = [r.value for records in batches.values() for r in records if r.value]
        assert got == [b"held"]
        await asyncio.sleep(0.2)
        assert fetcher._fetch_max_wait_ms == pacer.wait_ms  # the hold has passed
    finally:
        await consumer.stop()
        await producer.stop()
