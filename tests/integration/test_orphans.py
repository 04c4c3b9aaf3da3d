"""What a retired group left queued with no worker left, against a real broker: every request
gets an error result on its reply topic, what names no request goes to the DLQ, and the
group's offsets are committed past them all (its lag reads 0, and the scaler drops it)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.structs import OffsetAndMetadata

from infra.kafka import committed_offsets, make_consumer, make_producer
from infra.topics import TopicSpec, ensure_topics, standard_topics
from scaler.collector import collector as collector_module
from scaler.service import ScalerService
from schemas import headers as h
from schemas.frames import join_frame
from schemas.result import InferenceResult
from schemas.telemetry import InstanceRecord
from schemas.topics import DLQ, INSTANCES, request_topic, worker_group
from services.runtime.orphans import SweepCounts, answer_orphans
from services.runtime.publisher import Publisher
from tests.unit.scaler.test_retired_groups import Counted

pytestmark = pytest.mark.integration

PARTITIONS = 3
WHY = "model 'gone' is no longer in the repository"


def request(request_id: str, reply_to: str) -> bytes:
    return json.dumps(
        {
            "request_id": request_id,
            "model": "gone",
            "inputs": {"x": {"dtype": "float32", "shape": [1, 4], "data": [[0.0] * 4]}},
            "reply_to": reply_to,
        }
    ).encode()


def framed(request_id: str, reply_to: str) -> bytes:
    envelope = {
        "request_id": request_id,
        "model": "gone",
        "inputs": {"x": {"dtype": "float32", "shape": [1, 4], "raw": {"offset": 0, "nbytes": 16}}},
        "reply_to": reply_to,
    }
    return join_frame(json.dumps(envelope).encode(), [b"\x00" * 16])


@pytest.fixture
async def producer(broker: str) -> AsyncIterator[AIOKafkaProducer]:
    producer = make_producer(broker)
    await producer.start()
    yield producer
    await producer.stop()


async def read_all(
    broker: str, topic: str, until: int, *, source: str | None = None
) -> list[tuple[bytes | None, bytes, list[tuple[str, bytes]]]]:
    """(key, value, headers) of `topic`'s records from its start, waiting for `until` of
    them (only those whose DLQ source is `source`, when named)."""
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=broker, auto_offset_reset="earliest")
    await consumer.start()
    found: list[tuple[bytes | None, bytes, list[tuple[str, bytes]]]] = []
    try:
        async with asyncio.timeout(20):
            while len(found) < until:
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    for r in records:
                        if source is None or h.header(r.headers, h.SOURCE_TOPIC) == source:
                            found.append((r.key, r.value or b"", list(r.headers)))
        await asyncio.sleep(0.5)  # nothing more arrives
        for records in (await consumer.getmany(timeout_ms=500)).values():
            for r in records:
                if source is None or h.header(r.headers, h.SOURCE_TOPIC) == source:
                    found.append((r.key, r.value or b"", list(r.headers)))
    finally:
        await consumer.stop()
    return found


async def committed(broker: str, group: str, topic: str) -> dict[int, int | None]:
    consumer = make_consumer(bootstrap=broker, group_id=group)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        return {tp.partition: at for tp, at in (await committed_offsets(consumer, tps)).items()}
    finally:
        await consumer.stop()


async def queue(broker: str, producer: AIOKafkaProducer, unique: str) -> tuple[str, str, str]:
    """A tier topic with 2 requests already answered (committed), 3 waiting and one record
    that names no request; returns (topic, group, reply topic)."""
    topic = request_topic(f"gone{unique}", "interactive")
    group = worker_group(f"gone{unique}", "interactive")
    replies = f"inferbus.results.t{unique}"
    await ensure_topics(
        broker, [TopicSpec(topic, PARTITIONS), TopicSpec(replies, 1), TopicSpec(DLQ, 1)]
    )
    # One record batch of 4: Tansu reports its end as the batch's first offset + 1.
    sent = [
        await producer.send(topic, request(f"r{i}", replies), key=b"k", partition=0)
        for i in range(4)
    ]
    await asyncio.gather(*sent)
    await producer.send_and_wait(topic, framed("r4", replies), partition=1)
    await producer.send_and_wait(topic, b"no request here", partition=1)
    consumer = make_consumer(bootstrap=broker, group_id=group)
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.commit({tp: OffsetAndMetadata(2, "")})
    finally:
        await consumer.stop()
    return topic, group, replies


async def test_every_orphan_is_answered_or_dead_lettered_and_committed(
    broker: str, unique: str, producer: AIOKafkaProducer
) -> None:
    topic, group, replies = await queue(broker, producer, unique)
    seen: list[SweepCounts] = []

    done = await answer_orphans(
        broker,
        Publisher(producer),
        group=group,
        topic=topic,
        status="model_not_found",
        why=WHY,
        progress=seen.append,
    )

    assert done == SweepCounts(answered=3, dead_lettered=1)
    assert seen and seen[-1] == done
    answers = {key: (value, headers) for key, value, headers in await read_all(broker, replies, 3)}
    assert set(answers) == {b"r2", b"r3", b"r4"}, "the 2 committed were answered before"
    for value, _ in answers.values():
        result = InferenceResult.from_wire(value)
        assert result.status == "model_not_found" and result.error is not None
        assert result.error.message.startswith(WHY)
    assert h.header(answers[b"r2"][1], h.CONTENT_TYPE) == "application/json"
    assert h.header(answers[b"r4"][1], h.CONTENT_TYPE) != "application/json", "a frame's is one"
    dead = await read_all(broker, DLQ, until=1, source=topic)
    assert [value for _, value, _ in dead] == [b"no request here"]
    assert await committed(broker, group, topic) == {0: 4, 1: 2, 2: None}

    again = await answer_orphans(
        broker, Publisher(producer), group=group, topic=topic, status="model_not_found", why=WHY
    )
    assert again == SweepCounts(0, 0), "nothing is answered twice"


async def test_a_scaler_started_after_the_model_left_answers_its_queue_then_drops_it(
    broker: str, unique: str, producer: AIOKafkaProducer, tmp_path: Path, monkeypatch: Any
) -> None:
    """The model was removed while no scaler ran (or one stopped mid-sweep): its group is
    no target of the repository's. The scaler adopts it at start; it retires before its
    first collection, so its lag is not known: sweeps answer it until one finds nothing,
    then it is dropped. Through `on_tick`, as the scaler's loop runs it."""
    monkeypatch.setattr(collector_module, "RETIRE_AFTER_S", 0.0)
    topic, group, replies = await queue(broker, producer, unique)
    drained = request_topic(f"drained{unique}", "interactive")
    await ensure_topics(broker, [*standard_topics([]), TopicSpec(drained, PARTITIONS)])
    service = ScalerService(broker, tmp_path, Counted(0))
    await service.start()
    try:
        assert group in service.collector.groups, "adopted: it holds requests"
        assert worker_group(f"drained{unique}", "interactive") not in service.collector.groups
        async with asyncio.timeout(30):
            while group in service.collector.groups:
                await service.on_tick(await service.collector.collect_all())
                await asyncio.sleep(0.2)
    finally:
        await service.close()
    answers = {
        key: InferenceResult.from_wire(value)
        for key, value, _ in await read_all(broker, replies, 3)
    }
    assert {k: r.status for k, r in answers.items()} == {
        b"r2": "model_not_found",
        b"r3": "model_not_found",
        b"r4": "model_not_found",
    }
    dead = await read_all(broker, DLQ, until=1, source=topic)
    assert [value for _, value, _ in dead] == [b"no request here"]
    assert await committed(broker, group, topic) == {0: 4, 1: 2, 2: None}


async def test_a_leftover_group_with_live_workers_and_nothing_queued_is_adopted(
    broker: str, unique: str, producer: AIOKafkaProducer, tmp_path: Path
) -> None:
    """Its workers would otherwise run for good: no scaler that starts after its model
    left would know the group, so none would retire them."""
    topic = request_topic(f"idle{unique}", "interactive")
    group = worker_group(f"idle{unique}", "interactive")
    await ensure_topics(broker, [*standard_topics([]), TopicSpec(topic, PARTITIONS)])
    now = datetime.now(UTC)
    record = InstanceRecord(
        instance_id=f"w{unique}",
        model=f"idle{unique}",
        tiers=["interactive"],
        group=group,
        state="ready",
        started_at=now,
        updated_at=now,
        lease_s=30.0,
    )
    await producer.send_and_wait(
        INSTANCES, record.model_dump_json().encode(), key=record.instance_id.encode()
    )
    service = ScalerService(broker, tmp_path, Counted(1))
    await service.start()
    try:
        assert group in service.collector.groups
    finally:
        await service.close()
