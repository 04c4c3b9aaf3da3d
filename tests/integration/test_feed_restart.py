"""A feed (the scaler's telemetry and rollout readers) and the instance registry on a broker
that comes back without its logs: each must read the new log from its start, not wait for it
to pass the old position (the scaler was blind for minutes after a restart)."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta

import pytest

from infra.broker import EmbeddedBroker
from infra.feed import LOG_END_CHECK_S, TopicFeed
from infra.kafka import make_producer
from infra.topics import TopicSpec, ensure_topics
from scaler.registry import Registry
from schemas.telemetry import InstanceRecord

pytestmark = pytest.mark.integration


async def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = make_producer(bootstrap)
    await producer.start()
    try:
        for value in values:  # one batch each, as the registry's writers mostly do
            await producer.send_and_wait(topic, value, partition=0)
    finally:
        await producer.stop()


async def test_a_feed_reads_a_restarted_log_from_its_start() -> None:
    topic = "t-feed-restart"
    seen: list[bytes] = []
    with EmbeddedBroker(port=0) as broker:
        await ensure_topics(broker.bootstrap, [TopicSpec(topic, 1)])
        await produce(broker.bootstrap, topic, [f"old-{i}".encode() for i in range(30)])
        feed = TopicFeed(
            broker.bootstrap,
            topic,
            lambda key, value: seen.append(value or b""),
            name="test",
            start_at="earliest",
            poll_timeout_ms=200,
            start_attempts=20,
        )
        await feed.start()
        try:
            deadline = time.monotonic() + 30
            while len(seen) < 30:
                assert time.monotonic() < deadline, seen
                await asyncio.sleep(0.1)

            await asyncio.to_thread(broker.restart)  # memory only: every log is gone
            await ensure_topics(broker.bootstrap, [TopicSpec(topic, 1)])
            await produce(broker.bootstrap, topic, [f"new-{i}".encode() for i in range(3)])

            deadline = time.monotonic() + LOG_END_CHECK_S + 20
            while len(seen) < 33:
                assert time.monotonic() < deadline, f"the new log was not read: {seen[30:]}"
                await asyncio.sleep(0.2)
        finally:
            await feed.close()
    assert seen[30:] == [b"new-0", b"new-1", b"new-2"]
    assert feed.error is None


def heartbeat(instance_id: str, at: datetime) -> bytes:
    return (
        InstanceRecord(
            instance_id=instance_id,
            model="m",
            tiers=["interactive"],
            group="g",
            state="ready",
            started_at=at,
            updated_at=at,
        )
        .model_dump_json()
        .encode()
    )


async def test_the_registry_reads_a_restarted_log_from_its_start() -> None:
    topic = "t-registry-restart"
    start = datetime.now(UTC)
    with EmbeddedBroker(port=0) as broker:
        await ensure_topics(broker.bootstrap, [TopicSpec(topic, 1)])
        old = [heartbeat("old", start + timedelta(seconds=i)) for i in range(30)]
        await produce(broker.bootstrap, topic, old)
        registry = Registry(broker.bootstrap, topic=topic, poll_timeout_ms=200)
        await registry.start()
        try:
            await asyncio.wait_for(registry.caught_up.wait(), 30)
            deadline = time.monotonic() + 30
            while registry.table.instances.get("old") is None or registry.table.instances[
                "old"
            ].updated_at < start + timedelta(seconds=29):
                assert time.monotonic() < deadline, registry.table.instances
                await asyncio.sleep(0.1)

            await asyncio.to_thread(broker.restart)  # memory only: every log is gone
            await ensure_topics(broker.bootstrap, [TopicSpec(topic, 1)])
            later = start + timedelta(seconds=60)
            await produce(broker.bootstrap, topic, [heartbeat("new", later)])

            deadline = time.monotonic() + LOG_END_CHECK_S + 20
            while "new" not in registry.table.instances:
                assert time.monotonic() < deadline, "the registry did not read the new log"
                await asyncio.sleep(0.2)
        finally:
            await registry.close()
    assert registry.error is None
