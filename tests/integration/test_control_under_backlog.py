"""A backlogged reader keeps its registry view fresh: the registry records fetched are
folded ahead of the data, not after the data partitions' buffers drain (a stale view made
the others' leases seem to lapse, and a worker took partitions their owners still served)."""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import UTC, datetime

import pytest

from infra.kafka import make_producer
from infra.topics import ensure_topics, standard_topics
from schemas.telemetry import InstanceRecord
from schemas.topics import INSTANCES
from tests.integration.lone_worker import lone_worker

pytestmark = pytest.mark.integration

BACKLOG = 3_000
ENGINE_S = 0.005


async def test_a_registry_record_is_seen_while_the_data_backlog_lasts(broker: str) -> None:
    model = f"ctl-{uuid.uuid4().hex[:6]}"
    await ensure_topics(broker, standard_topics([model], tier_partitions=2))
    producer = make_producer(bootstrap=broker, client_id="ctl-test")
    await producer.start()
    now = datetime.now(UTC)
    worker = lone_worker(broker, producer, model, client_id="ctl-test")
    topic, group, membership, consumer = (
        worker.topic,
        worker.group,
        worker.membership,
        worker.consumer,
    )
    try:
        sent = [
            await producer.send(topic, b"x" * 200, key=str(i).encode(), partition=i % 2)
            for i in range(BACKLOG)
        ]
        await asyncio.gather(*sent)
        await membership.publish("ready")
        await consumer.start()
        data = 0
        for _ in range(100):  # take every partition (alone in the group) and start reading
            data += len(await consumer.poll(timeout_ms=200, max_records=1))
            if consumer.owned(topic) == {0, 1} and data:
                break
        assert consumer.owned(topic) == {0, 1}

        other = InstanceRecord(
            instance_id="other",
            service="inferbus-worker",
            model=model,
            tiers=["interactive"],
            group=group,
            groups=[group],
            state="ready",
            started_at=now,
            updated_at=datetime.now(UTC),
            ready_at=now,
            lease_s=30.0,
        )
        await producer.send_and_wait(INSTANCES, other.model_dump_json().encode(), key=b"other")
        sent_at = time.monotonic()
        while "other" not in membership.table.instances and time.monotonic() - sent_at < 5.0:
            data += len(await consumer.poll(timeout_ms=200, max_records=1))
            await asyncio.sleep(ENGINE_S)  # an engine that takes one record at a time
        seen_after_s = time.monotonic() - sent_at
        assert "other" in membership.table.instances, "not seen in 5 s"
        assert data < BACKLOG // 2, "the backlog was still there when the record was seen"
        assert seen_after_s <= 1.0, f"seen only after {seen_after_s:.1f} s"
    finally:
        await consumer.close()
        await producer.stop()
