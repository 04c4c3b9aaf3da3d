"""A starting scaler reads its recent decision records back from the real broker."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path

import pytest

from infra.kafka import make_producer
from infra.topics import TopicSpec, ensure_topics, standard_topics
from scaler.actuators.decisions import decision_record
from scaler.config import PolicyConfig
from scaler.decision import GroupDecision
from scaler.policy import POLICIES
from scaler.recall import recall
from scaler.recall_reader import read_decisions
from scaler.service import ScalerService
from schemas.topics import request_topic, worker_group
from tests.model_yaml import write_sim_model
from tests.unit.scaler.conftest import make_signals
from tests.unit.scaler.test_retired_groups import Counted

pytestmark = pytest.mark.integration

GROUPS = ("inferbus.workers.m.interactive", "inferbus.workers.m.batch")


def _record(group: str, at: float) -> bytes:
    signals = make_signals(group=group, collected_at=at)
    decision = GroupDecision(
        group=group, model="m", tier=signals.tier, current=4, desired=4, diagnosis="steady"
    )
    raw = decision_record(decision, policy="slo", at=at + 0.01, tick_at=at, signals=signals)
    return json.dumps(raw).encode()


async def test_the_records_since_a_time_are_read_back_and_replayed(broker: str) -> None:
    """Ten records from before the memory (written then, by their broker timestamps too),
    then fifteen ticks of two groups: what is read back replays into fifteen ticks."""
    topic = f"recall-{uuid.uuid4().hex[:8]}"
    await ensure_topics(broker, [TopicSpec(topic, 1)])
    now = time.time()
    since = now - 1800.0
    producer = make_producer(broker, client_id="recall-test")
    await producer.start()
    try:
        for k in range(10):
            old = now - 4000.0 + k
            await producer.send_and_wait(
                topic, _record(GROUPS[0], old), key=b"g", timestamp_ms=int(old * 1000)
            )
        for k in range(14):
            for group in GROUPS:
                await producer.send_and_wait(
                    topic, _record(group, now - 300.0 + 5.0 * k), key=group.encode()
                )
        # The last tick's records and a bad one in one batch: Tansu reports the end of a log
        # whose last batch holds several records as that batch's first offset + 1.
        last = [
            await producer.send(topic, _record(group, now - 300.0 + 5.0 * 14), key=b"g")
            for group in GROUPS
        ]
        last.append(await producer.send(topic, b"{not json", key=b"g"))
        for sent in last:
            await sent
    finally:
        await producer.stop()

    read = await read_decisions(broker, since=since, most=35, timeout_s=10.0, topic=topic)
    assert read.complete
    # Kafka starts at the first record of the memory; Tansu answers the log's first batch
    # for any time, and the read starts `most` records before the end instead.
    assert len(read.records) in {31, 35}
    got = recall(
        read.records,
        POLICIES["slo"],
        PolicyConfig(),
        since=since,
        until=time.time(),
        interval_s=5.0,
        idle_every_s=25.0,
        policy_name="slo",
    )
    assert got.ticks == 15
    assert got.skipped.get("not JSON") == 1
    assert got.skipped.get("older than the replay", 0) in {0, 4}
    assert sorted(g.group for g in got.state.groups) == sorted(GROUPS)
    assert got.since == pytest.approx(now - 300.0)


async def test_at_most_the_newest_records_are_read(broker: str) -> None:
    topic = f"recall-{uuid.uuid4().hex[:8]}"
    await ensure_topics(broker, [TopicSpec(topic, 1)])
    now = time.time()
    producer = make_producer(broker, client_id="recall-test")
    await producer.start()
    try:
        for k in range(12):
            at = now - 60.0 + 5.0 * k
            await producer.send_and_wait(topic, _record(GROUPS[0], at), key=b"g")
    finally:
        await producer.stop()
    read = await read_decisions(broker, since=now - 1800.0, most=5, timeout_s=10.0, topic=topic)
    assert read.complete
    assert [r["tick_at"] for r in read.records] == [now - 60.0 + 5.0 * k for k in range(7, 12)]


async def test_a_log_with_nothing_to_read(broker: str) -> None:
    topic = f"recall-{uuid.uuid4().hex[:8]}"
    await ensure_topics(broker, [TopicSpec(topic, 1)])
    read = await read_decisions(
        broker, since=time.time() - 1800.0, most=5, timeout_s=5.0, topic=topic
    )
    assert read.records == []
    assert read.complete


async def test_a_restarted_scaler_recalls_what_the_one_before_it_decided(
    broker: str, tmp_path: Path, unique: str
) -> None:
    """Two ScalerService processes' worth on the real broker: the first decides ticks on
    arrivals it collects, the second starts with that memory."""
    model = f"recall{unique}"
    write_sim_model(tmp_path, model, versions=("1",), tiers=["interactive"])
    await ensure_topics(broker, standard_topics([model], tiers=["interactive"]))
    group, topic = worker_group(model, "interactive"), request_topic(model, "interactive")
    first = ScalerService(broker, tmp_path, Counted(1))
    await first.start()
    producer = make_producer(broker, client_id="recall-test")
    await producer.start()
    try:
        for _ in range(6):
            for _ in range(20):
                await producer.send(topic, b"{}", key=b"k")
            await producer.flush()
            await first.on_tick(await first.collector.collect_all())
            await asyncio.sleep(0.3)
        before = first.state.get(group)
    finally:
        await producer.stop()
        await first.close()
    # No worker runs, so no per-replica rate: the arrivals are what it remembers.
    assert len(before.arrival_samples) >= 5, "the first scaler measured arrivals"

    second = ScalerService(broker, tmp_path, Counted(1))
    await second.start()
    try:
        assert second.recalled is not None
        assert second.recalled.ticks >= 6
        # The first scaler's first tick carried its memory (`scaler/checkpoint.py`).
        assert second.recalled.from_checkpoint is not None
        assert second.recalled.checkpoint_problems == {}
        again = second.state.get(group)
        assert again.arrival_samples == before.arrival_samples
        assert again.recommendations == before.recommendations
        assert again.last_signals is None  # no decision on the first scaler's signals
    finally:
        await second.close()
