"""A consumer stopped after its broker went away stops cleanly: aiokafka 0.14's fetcher
close let its own fetch task's cancellation escape `stop()` (seen leaving `async with
InferenceClient(...)` after `inferbus up` had stopped)."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from aiokafka import TopicPartition

from infra.broker import EmbeddedBroker
from infra.kafka import make_consumer
from infra.topics import TopicSpec, ensure_topics

pytestmark = pytest.mark.integration


async def test_a_consumer_whose_broker_is_gone_stops_without_raising() -> None:
    broker = EmbeddedBroker(port=0)
    bootstrap = broker.start()
    topic = f"t-{uuid.uuid4().hex[:8]}"
    try:
        await ensure_topics(bootstrap, [TopicSpec(topic, 1)])
        consumer = make_consumer(bootstrap=bootstrap, group_id=None, client_id="stop-test")
        await consumer.start()
        consumer.assign([TopicPartition(topic, 0)])
        await consumer.getmany(timeout_ms=300)  # a fetch request is now in flight
        broker.stop()
        await asyncio.sleep(1.5)  # its fetches fail and wait out their retry backoff

        await asyncio.wait_for(consumer.stop(), 15)  # raised CancelledError

        assert consumer._closed
        assert not consumer._client._conns, "its connections are closed"
    finally:
        broker.stop()
