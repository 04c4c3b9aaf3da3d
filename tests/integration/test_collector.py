"""The collector against a real broker: lag per partition equals the truth after batched produce."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.structs import OffsetAndMetadata

from infra.models.repository import ModelRepository
from infra.topics import TopicSpec, ensure_topics
from scaler.collector import Collector, CollectorConfig, GroupTarget, TelemetryFeed
from scaler.collector.collector import RETIRE_AFTER_S
from scaler.registry import Registry
from schemas.telemetry import Heartbeat, InstanceRecord, InstanceState, WorkerLoad
from schemas.topics import request_topic, worker_group

pytestmark = pytest.mark.integration

PARTITIONS = 3
T0_MS = 1_700_000_000_000


class Clock:
    """A fake clock the test moves by hand."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def write_model(root: Path, name: str) -> ModelRepository:
    (root / name).mkdir(parents=True)
    (root / name / "model.yaml").write_text(
        f"""
name: {name}
inputs: [{{name: x, dtype: float32, shape: [-1, 4]}}]
outputs: [{{name: y, dtype: float32, shape: [-1, 2]}}]
engine: {{kind: sim}}
replicas: {{min: 1, max: 8, warm: 1}}
slo: {{interactive: {{p99_e2e_ms: 450}}}}
"""
    )
    return ModelRepository(root)


async def produce_batch(
    producer: AIOKafkaProducer, topic: str, partition: int, count: int, ts_ms: int
) -> None:
    """`count` records sent together so they leave in one record batch."""
    futures = [
        await producer.send(topic, b"r", partition=partition, timestamp_ms=ts_ms + i)
        for i in range(count)
    ]
    await asyncio.gather(*futures)


async def commit(bootstrap: str, group: str, offsets: dict[int, int], topic: str) -> None:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False
    )
    await consumer.start()
    try:
        tps = {TopicPartition(topic, p): OffsetAndMetadata(o, "") for p, o in offsets.items()}
        consumer.assign(list(tps))
        await consumer.commit(tps)
    finally:
        await consumer.stop()


@pytest.fixture
async def producer(broker: str) -> AsyncIterator[AIOKafkaProducer]:
    producer = AIOKafkaProducer(bootstrap_servers=broker, linger_ms=50, enable_idempotence=False)
    await producer.start()
    yield producer
    await producer.stop()


async def test_lag_per_partition_equals_truth(
    broker: str, unique: str, tmp_path: Path, producer: AIOKafkaProducer
) -> None:
    model = f"m{unique}"
    topic, group = request_topic(model, "interactive"), worker_group(model, "interactive")
    instances = f"t-instances-{unique}"
    await ensure_topics(broker, [TopicSpec(topic, PARTITIONS), TopicSpec(instances, 1)])
    models = write_model(tmp_path, model)

    # Batches of several records: Tansu's end offset would be each last batch's base + 1.
    await produce_batch(producer, topic, 0, 10, T0_MS)
    await produce_batch(producer, topic, 0, 7, T0_MS + 100)
    await produce_batch(producer, topic, 1, 25, T0_MS + 200)
    await produce_batch(producer, topic, 2, 4, T0_MS + 300)
    await commit(broker, group, {0: 12, 1: 25}, topic)
    truth = {0: 17 - 12, 1: 0, 2: 4}

    states: tuple[tuple[InstanceState, float], ...] = (("loading", 1.0), ("ready", 6.0))
    for state, at in states:
        record = InstanceRecord(
            instance_id="w1",
            model=model,
            tiers=["interactive"],
            group=group,
            state=state,
            started_at=datetime.fromtimestamp(0, UTC),
            updated_at=datetime.fromtimestamp(at, UTC),
        )
        await producer.send_and_wait(instances, record.model_dump_json().encode(), key=b"w1")

    wall, mono = Clock(T0_MS / 1000 + 60.0), Clock(1000.0)
    registry = Registry(broker, topic=instances, poll_timeout_ms=200)
    telemetry = TelemetryFeed(broker, topic=f"t-telemetry-{unique}")
    telemetry.observe(
        Heartbeat(
            instance_id="w1",
            service="inferbus-worker",
            model=model,
            tiers=["interactive"],
            at=datetime.fromtimestamp(wall.now - 1, UTC),
            interval_s=5.0,
            load=WorkerLoad(busy_fraction=0.5, samples_per_s=40.0, mean_batch_size=8.0),
        )
    )
    collector = Collector(
        broker,
        [GroupTarget(model, "interactive")],
        models,
        registry=registry,
        telemetry=telemetry,
        config=CollectorConfig(stuck_after_collections=2, timeout_s=10.0),
        clock=wall,
        monotonic=mono,
    )
    await registry.start()
    await collector.start()
    try:
        await asyncio.wait_for(registry.caught_up.wait(), timeout=10)
        first = await collector.collect(group)
        assert first.error is None
        assert {p: lag.lag for p, lag in first.partitions.items()} == truth
        assert first.partitions[2].branch == "no_commit_yet"
        signals = first.signals
        assert signals is not None
        assert signals.lag == sum(truth.values())
        assert signals.partitions == PARTITIONS
        assert signals.slo_p99_e2e_ms == 450
        assert (signals.min_replicas, signals.max_replicas, signals.warm_replicas) == (1, 8, 1)
        # Oldest unconsumed: partition 0's offset 12, the third of its second batch (T0 + 102 ms).
        assert signals.oldest_age_ms == pytest.approx(wall.now * 1000 - (T0_MS + 102))
        assert signals.service_rps_per_replica == pytest.approx(80.0)
        assert signals.achieved_batch_size == pytest.approx(8.0)
        assert signals.utilization == pytest.approx(0.5)
        assert (signals.replicas, signals.ready_replicas) == (1, 1)
        assert signals.time_to_ready_s == pytest.approx(6.0)
        assert signals.arrival_rps is None  # One sample: no rate yet.

        # Ten seconds later: 30 more records arrived, 10 were served on partition 0.
        await produce_batch(producer, topic, 1, 30, T0_MS + 400)
        await commit(broker, group, {0: 17, 1: 25}, topic)
        mono.now += 10.0
        second = await collector.collect(group)
        truth = {0: 0, 1: 30, 2: 4}
        assert {p: lag.lag for p, lag in second.partitions.items()} == truth
        assert second.signals is not None
        assert second.signals.arrival_rps == pytest.approx(3.0)
        assert second.signals.lag == 34

        # Nothing moves for two more collections: partitions 1 and 2 are stuck.
        mono.now += 5.0
        await collector.collect(group)
        mono.now += 5.0
        third = await collector.collect(group)
        assert {p for p, lag in third.partitions.items() if lag.branch == "stuck"} == {1, 2}
        assert collector.failures() == {group: 0}
    finally:
        await collector.close()
        await registry.close()


async def test_failed_collection_is_counted_and_stale(
    broker: str, unique: str, tmp_path: Path
) -> None:
    model = f"m{unique}"
    group = worker_group(model, "batch")
    collector = Collector(
        broker,
        [GroupTarget(model, "batch")],
        write_model(tmp_path, model),
        registry=Registry(broker, topic=f"t-instances-{unique}"),
        telemetry=TelemetryFeed(broker),
        config=CollectorConfig(timeout_s=5.0),
    )
    await collector.start()
    try:
        # The tier topic does not exist: every collection fails and is counted.
        first = await collector.collect(group)
        second = await collector.collect(group)
        assert (first.failures, second.failures) == (1, 2)
        assert second.signals is None
        assert second.error is not None
        assert collector.failures() == {group: 2}
    finally:
        await collector.close()


def one_group_collector(
    broker: str, unique: str, model: str, models: ModelRepository, mono: Clock
) -> Collector:
    """A collector of `model`'s interactive group on this test's own registry and
    telemetry topics, on the clock the test moves."""
    return Collector(
        broker,
        [GroupTarget(model, "interactive")],
        models,
        registry=Registry(broker, topic=f"t-instances-{unique}"),
        telemetry=TelemetryFeed(broker, topic=f"t-telemetry-{unique}"),
        config=CollectorConfig(timeout_s=10.0),
        monotonic=mono,
    )


async def test_a_removed_model_s_group_retires_after_its_queue_is_answered(
    broker: str, unique: str, tmp_path: Path, producer: AIOKafkaProducer
) -> None:
    """A model removed from the repository failed every collection (ModelNotFound): its
    group held its last signals and its workers ran for good. Now, once it has been gone
    for `RETIRE_AFTER_S` (a folder being replaced comes back sooner), the group is
    collected with no floor, what is queued still counted, and dropped when asked."""
    model = f"m{unique}"
    topic, group = request_topic(model, "interactive"), worker_group(model, "interactive")
    await ensure_topics(broker, [TopicSpec(topic, PARTITIONS)])
    models = write_model(tmp_path, model)
    await produce_batch(producer, topic, 0, 3, T0_MS)
    mono = Clock(1000.0)
    collector = one_group_collector(broker, unique, model, models, mono)
    await collector.start()
    try:
        wanted = await collector.collect(group)
        assert wanted.retiring is None and wanted.signals is not None
        assert wanted.signals.min_replicas == 1
        shutil.rmtree(tmp_path / model)
        mono.now += 10.0
        held = await collector.collect(group)
        assert held.retiring is None and held.error is not None
        assert f"retires after {RETIRE_AFTER_S:.0f} s" in held.error
        mono.now += RETIRE_AFTER_S
        gone = await collector.collect(group)
        assert gone.error is None, gone.error
        assert gone.retiring == f"model {model!r} is no longer in the repository"
        assert gone.retired_answer == "model_not_found", "what ingest answers a new one"
        assert gone.signals is not None
        assert (gone.signals.min_replicas, gone.signals.warm_replicas) == (0, 0)
        assert gone.signals.lag == 3, "what is queued is still counted"
        assert gone.signals.slo_p99_e2e_ms == 450, "the last known SLO"
        await collector.drop(group)
        assert collector.groups == []
    finally:
        await collector.close()


async def test_a_tier_taken_out_of_model_yaml_retires_its_group_answered_invalid_input(
    broker: str, unique: str, tmp_path: Path
) -> None:
    model = f"m{unique}"
    topic, group = request_topic(model, "interactive"), worker_group(model, "interactive")
    await ensure_topics(broker, [TopicSpec(topic, PARTITIONS)])
    models = write_model(tmp_path, model)
    mono = Clock(1000.0)
    collector = one_group_collector(broker, unique, model, models, mono)
    await collector.start()
    try:
        assert (await collector.collect(group)).retiring is None
        yaml_file = tmp_path / model / "model.yaml"
        yaml_file.write_text(yaml_file.read_text() + "tiers: [batch]\n")
        mono.now += RETIRE_AFTER_S
        await collector.collect(group)  # the grace starts here
        mono.now += RETIRE_AFTER_S
        gone = await collector.collect(group)
        assert gone.retiring == f"model {model!r} no longer serves tier 'interactive'"
        assert gone.retired_answer == "invalid_input", "what ingest answers a new one"
    finally:
        await collector.close()
