"""Partition ownership on a real broker: joins and leaves hand partitions over, a killed
worker's partitions are served again after its lease, and no request is lost."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Iterable
from pathlib import Path

import numpy as np
import pytest
from aiokafka.errors import KafkaConnectionError

from infra.processes import inferbus_command
from infra.topics import ensure_topics, standard_topics
from schemas.result import InferenceResult
from schemas.topics import request_topic
from services.client import InferenceClient
from services.ingest.app import IngestService
from services.ingest.settings import IngestSettings
from services.models.demo import write_demo_models
from services.worker.app import Worker
from services.worker.settings import WorkerSettings
from tests.integration.stack import derive_model

pytestmark = pytest.mark.integration

TOPIC_PARTITIONS = 12


async def owned_by(worker: Worker) -> frozenset[int]:
    consumer = next(iter(worker.consumers.values()))
    return consumer.owned(request_topic(worker.settings.model, worker.tiers[0]))


async def until(predicate: object, timeout_s: float, what: str) -> float:
    """Wait for an async predicate; returns the seconds it took."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        if await predicate():  # type: ignore[operator]
            return time.monotonic() - started
        await asyncio.sleep(0.05)
    raise TimeoutError(f"not within {timeout_s}s: {what}")


@pytest.fixture
async def repo(broker: str, tmp_path: Path) -> AsyncIterator[tuple[str, Path, str]]:
    """A fresh sim model (its own topics) and an ingest in front of it."""
    models = tmp_path / "models"
    write_demo_models(models)
    name = f"own-{uuid.uuid4().hex[:6]}"
    derive_model(
        models,
        "demo-mlp",
        name,
        engine={"kind": "sim", "sim": {"a_ms": 1.0, "b_ms": 0.1, "per": "sample"}},
    )
    await ensure_topics(broker, standard_topics([name], tier_partitions=TOPIC_PARTITIONS))
    ingest = IngestService(broker, IngestSettings(models_dir=models))
    await ingest.start()
    yield broker, models, name
    await ingest.stop()


def worker(broker: str, models: Path, name: str) -> Worker:
    return Worker(broker, WorkerSettings(model=name, models_dir=models, lease_s=2.0))


async def send_all(
    client: InferenceClient, name: str, count: int, *, pace_s: float = 0.0
) -> list[InferenceResult]:
    x = np.ones((1, 16), dtype=np.float32)

    async def one(i: int) -> InferenceResult:
        await asyncio.sleep(i * pace_s)
        return await client.infer(client.build_request(name, {"x": x}), timeout_s=60)

    return await asyncio.gather(*(one(i) for i in range(count)))


def all_ok(results: Iterable[InferenceResult]) -> None:
    bad = [r for r in results if not r.ok]
    assert not bad, [(r.status, r.error) for r in bad[:3]]


async def test_a_join_and_a_leave_hand_partitions_over_without_losing_requests(
    repo: tuple[str, Path, str],
) -> None:
    broker, models, name = repo
    first = worker(broker, models, name)
    await first.start()
    await until(lambda: _is(owned_by(first), TOPIC_PARTITIONS), 10, "first owns all")
    second = worker(broker, models, name)
    try:
        async with InferenceClient(broker) as client:
            stream = asyncio.create_task(send_all(client, name, 400, pace_s=0.01))
            await asyncio.sleep(1.0)
            await second.start()
            await until(lambda: _split(first, second), 10, "partitions split between both")
            a, b = await owned_by(first), await owned_by(second)
            assert not a & b and len(a | b) == TOPIC_PARTITIONS
            assert abs(len(a) - len(b)) <= 1
            await first.stop()
            await until(lambda: _is(owned_by(second), TOPIC_PARTITIONS), 10, "second owns all")
            results = await asyncio.wait_for(stream, 90)
        all_ok(results)
        assert len({r.request_id for r in results}) == 400
        assert first.counts.get("ok", 0) > 0 and second.counts.get("ok", 0) > 0
    finally:
        await asyncio.gather(first.stop(), second.stop())


async def test_a_killed_workers_partitions_are_served_after_its_lease(
    repo: tuple[str, Path, str],
) -> None:
    broker, models, name = repo
    survivor = worker(broker, models, name)
    await survivor.start()
    env = {**os.environ, "INFERBUS_WORKER_LEASE_S": "2"}
    victim = await asyncio.create_subprocess_exec(
        *inferbus_command(
            "worker", "--model", name, "--bootstrap", broker, "--models", str(models)
        ),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        await until(
            lambda: _is_below(owned_by(survivor), TOPIC_PARTITIONS), 60, "the victim took some"
        )
        async with InferenceClient(broker) as client:
            stream = asyncio.create_task(send_all(client, name, 200, pace_s=0.02))
            await asyncio.sleep(1.0)
            victim.send_signal(signal.SIGKILL)
            await asyncio.wait_for(victim.wait(), 10)
            # Its lease (2 s) runs out, the next rebalance tick takes its partitions.
            took = await until(
                lambda: _is(owned_by(survivor), TOPIC_PARTITIONS), 10, "survivor owns all"
            )
            results = await asyncio.wait_for(stream, 60)
        assert took <= 2.0 + 2.0
        all_ok(results)
        assert len({r.request_id for r in results}) == 200
    finally:
        if victim.returncode is None:
            victim.kill()
            await victim.wait()
        await survivor.stop()


async def test_a_worker_whose_lease_lapses_stops_reading_and_gets_its_share_back(
    repo: tuple[str, Path, str],
) -> None:
    """A worker that cannot renew its record (starved, cut off from the broker) must stop
    reading before the others count it gone, or two workers serve the same partitions."""
    broker, models, name = repo
    cut_off, other = worker(broker, models, name), worker(broker, models, name)
    await asyncio.gather(cut_off.start(), other.start())
    await until(lambda: _split(cut_off, other), 15, "partitions split between both")
    renew = cut_off.membership._send

    async def unreachable(*args: object) -> None:
        raise KafkaConnectionError("registry unreachable (test)")

    try:
        async with InferenceClient(broker) as client:
            stream = asyncio.create_task(send_all(client, name, 300, pace_s=0.02))
            await asyncio.sleep(1.0)
            cut_off.membership._send = unreachable
            # Fenced at 3/4 of its 2 s lease, before the other counts it gone at 2 s.
            await until(lambda: _is(owned_by(cut_off), 0), 5, "the cut-off worker let go")
            await until(lambda: _is(owned_by(other), TOPIC_PARTITIONS), 10, "other owns all")
            cut_off.membership._send = renew
            await until(lambda: _split(cut_off, other), 15, "split again after renewal")
            results = await asyncio.wait_for(stream, 90)
        all_ok(results)
        assert len({r.request_id for r in results}) == 300
    finally:
        cut_off.membership._send = renew
        await asyncio.gather(cut_off.stop(), other.stop())


async def _is(owned: object, count: int) -> bool:
    return len(await owned) == count  # type: ignore[misc]


async def _is_below(owned: object, count: int) -> bool:
    return 0 < len(await owned) < count  # type: ignore[misc]


async def _split(first: Worker, second: Worker) -> bool:
    a, b = await owned_by(first), await owned_by(second)
    return bool(a) and bool(b) and len(a | b) == TOPIC_PARTITIONS and not a & b
