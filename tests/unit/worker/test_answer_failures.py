"""An answer task that raises never strands its records: they leave the books answered
`internal_error`, or, when even that fails, uncommitted so they are redelivered."""

from __future__ import annotations

import asyncio
import logging
import time
from types import SimpleNamespace
from typing import Any

import numpy as np
import orjson
import pytest

from schemas import headers as h
from services.runtime.offsets import OffsetTracker
from services.worker.batching import Batcher, BatchPolicy
from services.worker.engine_host import Ran
from services.worker.execution import RequestOutcome
from services.worker.inhand import InHand
from services.worker.pipeline import Pipeline
from services.worker.settings import WorkerSettings
from tests.unit.worker.test_expiry import TOPIC, Capture, PollingHost, polled
from tracing.breakdown import default_breakdown
from tracing.histogram import LatencyHistogram

FAR_MS = 30_000.0


class RanHost(PollingHost):
    """An engine that runs every batch at once, each request answered with outputs."""

    async def run(self, requests: list[Any], *args: Any) -> Ran:
        outcome = RequestOutcome(
            outputs={"y": np.zeros((1, 2), np.float32)},
            error=None,
            batch_size=len(requests),
            infer_ms=1.0,
            assemble_ms=0.0,
            split_ms=0.0,
        )
        engine = SimpleNamespace(info=SimpleNamespace(provider="fake", simulated=True))
        return Ran([outcome] * len(requests), time.time_ns(), engine, self.version)  # type: ignore[arg-type]


class FailingPublisher(Capture):
    """`send_all` raises (a defect in the publisher) its first `failures` calls."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures

    async def send_all(self, records: list[Any]) -> list[Any]:
        if self.failures > 0:
            self.failures -= 1
            raise RuntimeError("publisher defect")
        return await super().send_all(records)


def pipeline_of(publisher: Capture, *, slots: int = 4) -> tuple[Pipeline, OffsetTracker]:
    """A pipeline that runs a batch of two as soon as it has them."""
    offsets = OffsetTracker()
    pipeline = Pipeline(
        settings=WorkerSettings(model="demo-mlp", max_publishes_in_flight=slots),
        instance_id="worker-test",
        host=RanHost(),  # type: ignore[arg-type]
        batcher=Batcher[InHand](BatchPolicy(max_batch_size=2, max_queue_delay_s=0.001)),
        publisher=publisher,  # type: ignore[arg-type]
        offsets=offsets,
        groups={"batch": "inferbus.workers.demo-mlp.batch"},
    )
    return pipeline, offsets


async def off_the_books(pipeline: Pipeline, timeout_s: float = 2.0) -> None:
    """Wait until nothing is in hand and every answer task has ended."""

    async def emptied() -> None:
        while pipeline.in_hand:
            pipeline.answered.clear()
            await pipeline.answered.wait()
        await pipeline.settle()

    await asyncio.wait_for(emptied(), timeout_s)


async def run_batch(pipeline: Pipeline) -> None:
    now_ms = time.time() * 1000
    pipeline.take([polled(0, now_ms + FAR_MS), polled(1, now_ms + FAR_MS)], "batch")
    loop = asyncio.create_task(pipeline.engine_loop())
    try:
        await off_the_books(pipeline)
    finally:
        loop.cancel()


async def test_a_batch_whose_results_cannot_be_sent_is_left_uncommitted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The publisher raises on the results and again on their internal_error answers: the
    # records leave the worker's hands, and commits stop short of them (redelivered).
    publisher = FailingPublisher(failures=1_000)
    pipeline, offsets = pipeline_of(publisher)
    with caplog.at_level(logging.ERROR, logger="services.worker.pipeline"):
        await run_batch(pipeline)
    assert pipeline.in_hand == 0
    assert offsets.total_in_flight() == 0
    assert publisher.sent == []
    assert offsets.committable() == {(TOPIC, 0): 0}, "left uncommitted, not answered"
    assert "event=answer_task_failed requests=2" in caplog.text
    assert "event=answers_abandoned requests=2" in caplog.text


async def test_a_batch_whose_results_failed_once_is_answered_internal_error() -> None:
    publisher = FailingPublisher(failures=1)
    pipeline, offsets = pipeline_of(publisher)
    await run_batch(pipeline)
    answers = [orjson.loads(record.value) for record in publisher.sent]
    assert [(a["request_id"], a["status"]) for a in answers] == [
        ("r0", "internal_error"),
        ("r1", "internal_error"),
    ]
    assert answers[0]["error"]["message"].endswith("RuntimeError")
    assert pipeline.in_hand == 0 and offsets.total_in_flight() == 0
    assert offsets.committable() == {(TOPIC, 0): 2}
    assert pipeline.counts["internal_error"] == 2


async def test_the_engine_loop_takes_the_next_batch_after_a_failed_one() -> None:
    # The failed task gave its publish slot back: with one slot, a second batch still runs.
    publisher = FailingPublisher(failures=1_000)
    pipeline, offsets = pipeline_of(publisher, slots=1)
    await run_batch(pipeline)
    publisher.failures = 0
    now_ms = time.time() * 1000
    pipeline.take([polled(2, now_ms + FAR_MS), polled(3, now_ms + FAR_MS)], "batch")
    loop = asyncio.create_task(pipeline.engine_loop())
    try:
        await off_the_books(pipeline)
    finally:
        loop.cancel()
    assert [orjson.loads(r.value)["status"] for r in publisher.sent] == ["ok", "ok"]
    assert offsets.committable() == {(TOPIC, 0): 0}, "the floor stays below the abandoned"


async def test_a_dead_letter_that_raises_is_left_uncommitted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    publisher = FailingPublisher(failures=1_000)
    pipeline, offsets = pipeline_of(publisher)
    record = polled(0, time.time() * 1000 + FAR_MS)
    record.value = b"not json"
    with caplog.at_level(logging.ERROR, logger="services.worker.pipeline"):
        pipeline.take([record], "batch")
        await off_the_books(pipeline)
    assert "event=answers_abandoned requests=1" in caplog.text
    assert pipeline.in_hand == 0 and offsets.total_in_flight() == 0
    assert offsets.committable() == {(TOPIC, 0): 0}


async def test_a_metrics_error_after_the_acks_answers_each_request_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Accounting runs after the books: results the broker took stay answered, once.
    import services.worker.pipeline as pipeline_module

    def count_request(*args: Any) -> None:
        raise ValueError("metrics defect")

    monkeypatch.setattr(pipeline_module, "count_request", count_request)
    publisher = FailingPublisher(failures=0)
    pipeline, offsets = pipeline_of(publisher)
    await run_batch(pipeline)
    answers = [orjson.loads(record.value) for record in publisher.sent]
    assert [(a["request_id"], a["status"]) for a in answers] == [("r0", "ok"), ("r1", "ok")]
    assert all(h.header(r.headers, h.ERROR_CODE) is None for r in publisher.sent)
    assert pipeline.in_hand == 0 and offsets.total_in_flight() == 0
    assert offsets.committable() == {(TOPIC, 0): 2}


async def test_an_answered_batch_records_each_request_s_wait_and_engine_time() -> None:
    # What the scaler reads as queue and engine p99: the p99 of each request's sum, not a
    # sum of the stages' p99s.
    default_breakdown().snapshot_and_reset()
    publisher = Capture()
    pipeline, _ = pipeline_of(publisher)
    await run_batch(pipeline)
    recorded = {
        e["stage"]: LatencyHistogram.from_dict(e)
        for e in default_breakdown().snapshot_and_reset()
        if (e["model"], e["tier"]) == ("demo-mlp", "batch")
    }
    timings = [orjson.loads(record.value)["timings"] for record in publisher.sent]
    waits = [t["queue_ms"] + t["batch_wait_ms"] for t in timings]
    engines = [t["preprocess_ms"] + t["infer_ms"] + t["postprocess_ms"] for t in timings]
    assert recorded["wait"].count == recorded["engine"].count == 2
    assert recorded["wait"].sum == pytest.approx(sum(waits))
    # The recorded postprocess time also holds encoding the result, after it was encoded.
    assert recorded["engine"].sum == pytest.approx(sum(engines), abs=1.0)
    assert recorded["engine"].sum >= sum(engines)
