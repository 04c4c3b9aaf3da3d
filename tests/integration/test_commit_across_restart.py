"""A commit that failed while the broker was away is not written to a fresh broker.

Seen live over a broker restart: the commit was retried once a broker with no state was
back, and wrote the old log's offset (55) to it; the worker that took the partition read
the new log from 55 while it ended at 10, and its first 10 requests were never answered.
The consumer now asks whether the broker kept its logs before a commit that follows a
failed one."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from infra.broker import EmbeddedBroker
from infra.kafka import make_producer
from infra.topics import ensure_topics, standard_topics
from schemas.topics import request_topic, worker_group
from services.runtime.committer import Committer
from tests.integration.lone_worker import lone_worker

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RECORDS = 10
OUTAGE_S = 3.0
"""Longer than the consumer's commit timeout (2 s): a commit sent just before a shorter
outage ends still lands on the fresh broker (docs/kafka.md)."""


async def test_a_commit_retried_across_a_restart_is_not_written_to_the_fresh_broker() -> None:
    model = f"restart-{uuid.uuid4().hex[:6]}"
    topic, group = request_topic(model, "interactive"), worker_group(model, "interactive")
    topics = standard_topics([model], tier_partitions=1)
    broker = EmbeddedBroker(port=0)
    bootstrap = broker.start()
    await ensure_topics(bootstrap, topics)
    producer = make_producer(bootstrap=bootstrap, client_id="restart-test")
    await producer.start()

    worker = lone_worker(bootstrap, producer, model, client_id="restart-test", lease_s=60.0)
    membership, offsets, consumer = worker.membership, worker.offsets, worker.consumer
    try:
        for i in range(RECORDS):
            await producer.send_and_wait(topic, b"x", key=f"r{i}".encode(), partition=0)
        for _ in range(3):  # registry records: the control log's position moves past 0
            await membership.publish("ready")
        await consumer.start()
        records = []
        deadline = time.monotonic() + 20.0
        while len(records) < RECORDS and time.monotonic() < deadline:
            records += await consumer.poll(timeout_ms=200)
        assert len(records) == RECORDS

        broker.stop()  # a memory-only broker: every log and offset goes with it
        for record in records:
            epoch = offsets.polled(record.topic, record.partition, record.offset)
            offsets.answered(record.topic, record.partition, record.offset, epoch)
        consumer.request_commit()  # times out: the broker is away; asked again first
        await asyncio.sleep(OUTAGE_S)
        broker.start()  # the same port, no state
        await ensure_topics(bootstrap, topics)
        await asyncio.sleep(6.0)  # the commit loop retries every 0.5 s

        fresh = Committer(bootstrap, group=group, topic=topic, client_id="restart-test-check")
        await fresh.start(1)
        try:
            assert await fresh.committed([0]) == {0: None}, "the old log's offset was committed"
        finally:
            await fresh.stop()
    finally:
        await asyncio.gather(consumer.close(), producer.stop(), return_exceptions=True)
        broker.stop()
