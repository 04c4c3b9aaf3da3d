"""Ingest's queue depths against a real broker: known before the first request, a topic
never read is read as soon as a request is routed to it, not at the next refresh, and a
stalled group's drain rate is floored by what it served while it kept up."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from aiokafka import TopicPartition
from aiokafka.structs import OffsetAndMetadata

from infra.kafka import make_consumer, make_producer
from infra.topics import TopicSpec, ensure_topics
from schemas.topics import request_topic, worker_group
from services.ingest.catalog import QueueDepths

pytestmark = pytest.mark.integration

NEVER = 600_000
"""A refresh interval no test waits for: only the first read and the kick can read."""


async def consumed_backlog(broker: str, model: str, *, produced: int, committed: int) -> str:
    """A model's interactive tier topic with `produced` records, its workers' group
    committed at `committed`."""
    topic = request_topic(model, "interactive")
    await ensure_topics(broker, [TopicSpec(topic, 1)])
    producer = make_producer(bootstrap=broker, client_id="depths-test")
    group = make_consumer(
        bootstrap=broker, group_id=worker_group(model, "interactive"), client_id="depths-test"
    )
    await producer.start()
    await group.start()
    try:
        for i in range(produced):
            await producer.send_and_wait(topic, f"r{i}".encode(), partition=0)
        tp = TopicPartition(topic, 0)
        group.assign([tp])
        await group.commit({tp: OffsetAndMetadata(committed, "")})
    finally:
        await group.stop()
        await producer.stop()
    return topic


async def test_a_fresh_ingest_knows_the_depth_before_its_first_request(broker: str) -> None:
    model = f"depths-{uuid.uuid4().hex[:8]}"
    topic = await consumed_backlog(broker, model, produced=10, committed=7)
    depths = QueueDepths(broker, refresh_ms=NEVER)
    depths.watch_models([model])
    await depths.start()
    try:
        assert depths.depth(topic) == 3
        depths.reserve(topic)
        assert depths.depth(topic) == 4, "the routed request counts at once"
    finally:
        await depths.stop()


async def test_a_topic_never_read_is_read_when_a_request_is_routed_to_it(broker: str) -> None:
    model = f"depths-{uuid.uuid4().hex[:8]}"
    depths = QueueDepths(broker, refresh_ms=NEVER)
    await depths.start()  # watching nothing yet: the topic comes later (a new model)
    try:
        topic = await consumed_backlog(broker, model, produced=10, committed=4)
        depths.watch_models([model])
        depths.reserve(topic)
        assert depths.depth(topic) == 1, "only the reservation is known yet"
        for _ in range(250):  # up to 5 s; the refresh interval is ten minutes
            if depths.depth(topic) != 1:
                break
            await asyncio.sleep(0.02)
        assert depths.depth(topic) == 7, "read at once: 10 - 4 committed, +1 in flight"
    finally:
        await depths.stop()


async def test_a_stalled_group_is_not_taken_for_a_slow_one(broker: str) -> None:
    """Its only worker killed, a group commits a trickle while requests pile up: the drain
    rate admission uses stays at what it served while it kept up, then, once that is
    older than the memory, falls to what it measures."""
    model = f"depths-{uuid.uuid4().hex[:8]}"
    topic = await consumed_backlog(broker, model, produced=0, committed=0)
    tp = TopicPartition(topic, 0)
    # A memory well over the stall's three intervals (~1 s here), so a slow host cannot let
    # it lapse before the first check.
    depths = QueueDepths(broker, refresh_ms=NEVER, served_memory_s=5.0)
    producer = make_producer(bootstrap=broker, client_id="depths-test")
    group = make_consumer(
        bootstrap=broker, group_id=worker_group(model, "interactive"), client_id="depths-test"
    )
    await producer.start()
    await group.start()
    group.assign([tp])
    end = 0

    async def interval(produce: int, commit_to: int) -> None:
        nonlocal end
        for _ in range(produce):
            await producer.send_and_wait(topic, b"r", partition=0)
        end += produce
        await group.commit({tp: OffsetAndMetadata(commit_to, "")})
        await asyncio.sleep(0.2)
        await depths.refresh([topic])

    depths.watch_models([model])
    try:
        await depths.refresh([topic])
        for _ in range(3):  # keeping up, the depth's noise reading "growing" every other time
            await interval(10, end + 7)
            await interval(10, end + 10)
        assert depths.drain_rate(topic) is None, "keeping up: no drain rate is known"
        committed = end
        for _ in range(3):  # the worker is gone: 20 more an interval, one committed
            committed += 1
            await interval(20, committed)
        stalled = depths.drain_rate(topic)
        # Kept up at ~10 an interval of >= 0.2 s; the stall commits 1 an interval (<= 5/s).
        assert stalled is not None and stalled >= 10.0, stalled
        await asyncio.sleep(5.0)  # the memory passes with the group still stalled
        for _ in range(2):
            committed += 1
            await interval(20, committed)
        measured = depths.drain_rate(topic)
        assert measured is not None and measured <= 5.0, measured
    finally:
        await group.stop()
        await producer.stop()
        await depths.stop()
