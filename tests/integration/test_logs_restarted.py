"""A model added while the stack runs gets its topics made, and nothing else replays: the
note that new logs exist names its topics, and only those are read from the start (every
log was read again before, re-routing and re-serving everything still in retention)."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

from infra.topics import ensure_topics, standard_topics
from schemas.topics import request_topic
from services.client import InferenceClient
from services.ingest.app import IngestService
from services.ingest.settings import IngestSettings
from services.models.demo import write_demo_models
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
