"""A model added while the stack runs gets its topics made, and nothing else replays: the
note that new logs exist names its topics, and only those are read from the start (every
log was read again before, re-routing and re-serving everything still in retention)."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from aiokafka.structs import RecordMetadata, TopicPartition

from infra.kafka import make_producer
from infra.topics import ensure_topics, standard_topics
from schemas.topics import INSTANCES, request_topic
from services.client import InferenceClient
from services.ingest.app import IngestService
from services.ingest.settings import IngestSettings
from services.models.demo import write_demo_models
from services.runtime.membership import gone_record
from services.runtime.publisher import Outgoing, Publisher
from services.worker.app import Worker
from services.worker.settings import WorkerSettings
from tests.integration.stack import derive_model

pytestmark = pytest.mark.integration

SIM = {"kind": "sim", "sim": {"a_ms": 1.0, "b_ms": 0.1, "per": "sample"}}


async def settled(count: object, quiet_s: float = 1.0, timeout_s: float = 30.0) -> int:
    """The value of `count()` once it has not moved for `quiet_s`."""
    last, since, started = count(), time.monotonic(), time.monotonic()  # type: ignore[operator]
    while time.monotonic() - started < timeout_s:
        await asyncio.sleep(0.1)
        now = count()  # type: ignore[operator]
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            return int(last)
    raise TimeoutError(f"still moving after {timeout_s}s")


async def test_adding_a_model_replays_nothing_else(broker: str, tmp_path: Path) -> None:
    models = tmp_path / "models"
    write_demo_models(models)
    name = f"replay-{uuid.uuid4().hex[:6]}"
    derive_model(models, "demo-mlp", name, engine=SIM)
    await ensure_topics(broker, standard_topics([name, "demo-mlp", "demo-encoder"]))
    ingest = IngestService(broker, IngestSettings(models_dir=models))
    worker = Worker(broker, WorkerSettings(model=name, models_dir=models, tiers=["interactive"]))
    await ingest.start()
    await worker.start()
    try:
        async with InferenceClient(broker) as client:
            x = np.full((1, 16), 0.5, dtype=np.float32)
            for _ in range(10):
                request = client.build_request(name, {"x": x}, timeout_ms=20_000)
                result = await client.infer(request, timeout_s=30)
                assert result.status == "ok", result.error
        routed = await settled(lambda: ingest.counts["routed"])
        served = await settled(lambda: worker.counts["ok"])

        late = f"late-{uuid.uuid4().hex[:6]}"
        derive_model(models, "demo-mlp", late, engine=SIM)  # `inferbus models add`, live
        heard_before = worker.membership.broker_restarts
        for _ in range(200):  # the keeper's round is every 2 s
            if worker.membership.broker_restarts > heard_before:
                break
            await asyncio.sleep(0.1)
        named = worker.membership.restarted_since(heard_before)
        assert named is not None, "the keeper made the topics and said which"
        assert request_topic(late, "interactive") in named
        await asyncio.sleep(2.0)  # polls that would have read every log again

        assert ingest.counts["routed"] == routed, "ingest routed old requests again"
        assert worker.counts["ok"] == served, "the worker served old requests again"
    finally:
        await worker.stop()
        await ingest.stop()


async def test_a_registry_batch_of_several_records_is_not_a_lost_log(
    broker: str, tmp_path: Path
) -> None:
    """Regression (a new user's pass, after a broker restart): two registry records in one
    batch put every consumer's position past Tansu's reported end (the batch's first offset
    + 1), every consumer decided the broker had lost its logs, and read every log again.

    Other writers (heartbeats) may append after the batch before the check, which ends the
    suspect state: the batch is written again until a check sees the position past the
    reported end."""
    models = tmp_path / "models"
    write_demo_models(models)
    await ensure_topics(broker, standard_topics(["demo-mlp", "demo-encoder"]))
    ingest = IngestService(broker, IngestSettings(models_dir=models))
    await ingest.start()
    client = InferenceClient(broker)
    await client.start()
    producer = make_producer(broker)
    await producer.start()
    consumer = ingest.consumers[0]
    verdicts: list[tuple[bool | None, bool]] = []
    try:
        for _ in range(20):
            last = await _registry_batch_of_two(producer)
            tp = TopicPartition(INSTANCES, last.partition)
            deadline = time.monotonic() + 30
            assert client._consumer is not None
            for reader in (consumer._consumer, client._consumer):
                while await reader.position(tp) <= last.offset:
                    assert time.monotonic() < deadline, "the registry batch was never read"
                    await asyncio.sleep(0.05)
            reported = (await consumer._consumer.end_offsets([tp]))[tp]
            if reported > last.offset:
                continue  # something was written after the batch: no suspect to judge
            verdicts.append((await consumer._logs_lost(), await client._registry_overrun()))
            if len(verdicts) == 3:
                break
    finally:
        await producer.stop()
        await client.stop()
        await ingest.stop()
    assert verdicts, "never saw the position past the reported end: the case went untested"
    assert all(v == (False, False) for v in verdicts), verdicts


async def _registry_batch_of_two(producer: Any) -> RecordMetadata:
    """Two 'gone' records of made-up workers, in one batch; the second one's metadata."""
    ghosts = [
        gone_record(
            f"ghost-{i}-{uuid.uuid4().hex[:6]}",
            model="demo-mlp",
            tiers=["interactive"],
            group="inferbus.workers.demo-mlp.interactive",
            service="inferbus-worker",
        )
        for i in range(2)
    ]
    acks = await Publisher(producer).send_all(
        [
            Outgoing(INSTANCES, g.instance_id.encode(), g.model_dump_json().encode(), [])
            for g in ghosts
        ]
    )
    first, last = acks
    assert isinstance(first, RecordMetadata) and isinstance(last, RecordMetadata), acks
    assert last.offset == first.offset + 1, "one batch"
    return last
