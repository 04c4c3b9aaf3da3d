"""Canary rollout on a real broker: a canary made worse on purpose is rolled back by the
scaler's verdict by itself, and every request is answered; a canary that cannot load never
takes a request from stable."""

from __future__ import annotations

import asyncio
import shutil
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from infra.models.repository import ModelRepository
from infra.rollout.feed import RolloutFeed
from infra.rollout.state import RolloutBook
from infra.topics import ensure_topics, repository_topics
from scaler.actuators.local import LocalActuator
from scaler.collector.collector import CollectorConfig
from scaler.service import ScalerService
from schemas.result import InferenceResult
from services.client import InferenceClient
from services.ingest.app import IngestService
from services.ingest.settings import IngestSettings
from services.models.demo import write_demo_models
from services.models.rollout import manual_record, publish_manual, workers_ready
from services.worker.app import Worker, WorkerFailed
from services.worker.settings import WorkerSettings
from tests.integration.stack import derive_model

pytestmark = pytest.mark.integration

VERDICT = {
    "window_s": 30,
    "min_requests": 20,
    "max_error_rate_increase": 0.05,
    "max_p99_ratio": 3.0,
    "min_p99_increase_ms": 500,
}


def canary_model(root: Path, *, canary_sim: str, share: float) -> str:
    """A sim model with versions 1 (good) and 2 (its sim.yaml says how it is bad), serving
    the interactive tier only, stable 1 and canary 2 at `share`."""
    write_demo_models(root)
    name = f"can-{uuid.uuid4().hex[:6]}"
    derive_model(
        root,
        "demo-mlp",
        name,
        engine={"kind": "sim", "sim": {"a_ms": 2.0, "b_ms": 0.1, "per": "sample"}},
        tiers=["interactive"],
        batching={"max_batch_size": 8, "max_queue_delay_ms": 2.0},
        rollout={"stable": "1", "canary": "2", "share": share, "verdict": VERDICT},
    )
    shutil.copytree(root / name / "1", root / name / "2")
    (root / name / "2" / "sim.yaml").write_text(canary_sim)
    for demo in ("demo-mlp", "demo-encoder"):  # only this model: the scaler collects all
        shutil.rmtree(root / demo)
    return name


def worker(broker: str, models: Path, name: str, lane: str) -> Worker:
    return Worker(
        broker,
        WorkerSettings(
            model=name,
            models_dir=models,
            lane=lane,  # type: ignore[arg-type]
            lease_s=2.0,
            heartbeat_interval_s=0.5,
            reload_check_s=0.2,
        ),
    )


async def until(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"not within {timeout_s}s: {what}")
        await asyncio.sleep(0.05)


async def send(
    client: InferenceClient, name: str, count: int, *, seed: int, pace_s: float
) -> list[InferenceResult]:
    """`count` requests with varied inputs (the sim's failures depend on them), paced."""
    rng = np.random.default_rng(seed)
    inputs = [rng.standard_normal((1, 16)).astype(np.float32) * 10 for _ in range(count)]

    async def one(i: int) -> InferenceResult:
        await asyncio.sleep(i * pace_s)
        request = client.build_request(name, {"x": inputs[i]}, timeout_ms=30_000)
        return await client.infer(request, timeout_s=40)

    return await asyncio.gather(*(one(i) for i in range(count)))


Start = Callable[..., Awaitable[tuple[str, IngestService]]]


@pytest.fixture
async def ingest(broker: str, tmp_path: Path) -> AsyncIterator[Start]:
    """Writes the model, creates its topics (stable and canary), starts ingest."""
    started: list[IngestService] = []
    models = tmp_path / "models"

    async def start(*, canary_sim: str, share: float) -> tuple[str, IngestService]:
        name = canary_model(models, canary_sim=canary_sim, share=share)
        await ensure_topics(broker, repository_topics(ModelRepository(models), tier_partitions=2))
        service = IngestService(broker, IngestSettings(models_dir=models))
        started.append(service)
        await service.start()
        return name, service

    yield start
    for service in started:
        await service.stop()


async def test_a_worse_canary_is_rolled_back_by_itself_and_every_request_is_answered(
    broker: str, tmp_path: Path, ingest: Start
) -> None:
    name, front = await ingest(canary_sim="a_ms: 2\nb_ms: 0.1\nerror_rate: 0.5\n", share=0.5)
    models = tmp_path / "models"
    stable, canary = worker(broker, models, name, "stable"), worker(broker, models, name, "canary")
    scaler = ScalerService(
        broker,
        models,
        LocalActuator(broker, models),
        act=False,  # the workers are this test's: the scaler judges, it does not scale
        collector_config=CollectorConfig(interval_s=0.5, rate_window_s=5.0),
    )
    seen = RolloutFeed(broker, RolloutBook())
    try:
        await asyncio.gather(stable.start(), canary.start(), scaler.start(), seen.start())
        assert stable.host.version is not None and stable.host.version.version == "1"
        assert canary.host.version is not None and canary.host.version.version == "2"
        assert canary.groups["interactive"] == f"inferbus.workers.{name}.canary.interactive"
        stop = asyncio.Event()
        judging = asyncio.create_task(scaler.run(stop))
        async with InferenceClient(broker) as client:
            before = await send(client, name, 240, seed=1, pace_s=0.01)
            await until(lambda: seen.book.get(name) is not None, 20, "a verdict on the bus")
            record = seen.book.get(name)
            assert record is not None
            await until(lambda: front.membership.rollouts.get(name) == record, 10, "ingest has it")
            after = await send(client, name, 60, seed=2, pace_s=0.005)
        stop.set()
        await judging
    finally:
        await seen.close()
        await scaler.close()
        await asyncio.gather(stable.stop(), canary.stop())

    # Every request answered: an ok result, or the bad canary's named error.
    assert {r.status for r in before} <= {"ok", "internal_error"}
    by_version = {v: [r for r in before if r.model_version == v] for v in ("1", "2")}
    assert by_version["1"] and by_version["2"], "both sides served before the verdict"
    assert all(r.ok for r in by_version["1"])
    assert any(r.status == "internal_error" for r in by_version["2"])
    # Rolled back by the verdict, with its numbers.
    assert (record.state, record.share, record.by) == ("rolled_back", 0.0, "verdict")
    assert record.evidence is not None and record.evidence.rule == "error_rate"
    assert record.evidence.canary.version == "2"
    assert record.evidence.canary.error_rate > record.evidence.stable.error_rate + 0.05
    assert record.evidence.canary.requests >= VERDICT["min_requests"]
    # After the rollback every request goes to stable.
    assert all(r.ok and r.model_version == "1" for r in after), [
        (r.status, r.model_version) for r in after if not r.ok or r.model_version != "1"
    ]


async def test_a_canary_that_cannot_load_is_refused_and_stable_serves_everything(
    broker: str, tmp_path: Path, ingest: Start
) -> None:
    name, _ = await ingest(canary_sim="a_ms: [\n", share=1.0)
    models = tmp_path / "models"
    stable, canary = worker(broker, models, name, "stable"), worker(broker, models, name, "canary")
    try:
        await stable.start()
        with pytest.raises(WorkerFailed) as refused:
            await canary.start()
        async with InferenceClient(broker) as client:
            results = await send(client, name, 40, seed=3, pace_s=0.005)
            x = np.ones((1, 16), dtype=np.float32)
            pinned = await client.infer(
                client.build_request(name, {"x": x}, model_version="2"), timeout_s=40
            )
    finally:
        await asyncio.gather(stable.stop(), canary.stop())
    assert "rollout.canary" in str(refused.value) and "sim.yaml" in str(refused.value)
    # Share 1.0, but no canary worker is ready: ingest routes every request to stable.
    assert all(r.ok and r.model_version == "1" for r in results)
    # One that names the canary's version is not run on the stable one (it was, answered ok).
    assert pinned.status == "model_not_found", pinned
    assert pinned.error is not None and "version '2' is not served" in pinned.error.message


async def test_a_promotion_moves_stable_workers_to_the_canary_version(
    broker: str, tmp_path: Path, ingest: Start
) -> None:
    name, front = await ingest(canary_sim="a_ms: 2\nb_ms: 0.1\n", share=0.5)
    models = tmp_path / "models"
    stable, canary = worker(broker, models, name, "stable"), worker(broker, models, name, "canary")
    try:
        await asyncio.gather(stable.start(), canary.start())
        # What `inferbus models promote` checks first: a canary worker serves the version.
        ready = await workers_ready(broker, name)
        assert ready["canary"] == {"2": 1} and ready["stable"] == {"1": 1}, ready
        config = ModelRepository(models).config(name)
        record = manual_record(config, "promote", at=datetime.now(UTC), by="cli:test@here")
        await publish_manual(broker, record)
        await until(
            lambda: stable.host.version is not None and stable.host.version.version == "2",
            15,
            "the stable worker switched to the promoted version",
        )
        await until(lambda: front.membership.rollouts.get(name) == record, 10, "ingest has it")
        async with InferenceClient(broker) as client:
            results = await send(client, name, 40, seed=4, pace_s=0.005)
        canary_ok = canary.counts.get("ok", 0)
    finally:
        await asyncio.gather(stable.stop(), canary.stop())
    assert all(r.ok and r.model_version == "2" for r in results)
    served_by = {r.worker_id for r in results}
    assert served_by == {stable.instance_id}, "the canary lane takes no requests after it"
    assert canary_ok == 0
