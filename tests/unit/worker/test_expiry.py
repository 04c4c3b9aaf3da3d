"""Requests whose deadline passes while they wait in the worker are answered then, not when
a batch would have reached them."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiokafka.structs import ConsumerRecord

from schemas import headers as h
from services.models.demo import mlp_config
from services.runtime.offsets import OffsetTracker
from services.worker.batching import Batcher, BatchPolicy
from services.worker.inhand import InHand
from services.worker.pipeline import EXPIRY_SWEEP_S, Pipeline
from services.worker.settings import WorkerSettings

TOPIC = "inferbus.req.demo-mlp.batch"


@dataclass
class Version:
    version: str = "1"


class BusyHost:
    """An engine that never gets to the queue."""

    version = Version()
    engine = None

    async def run(self, *args: Any, **kwargs: Any) -> Any:
        await asyncio.Event().wait()


class Capture:
    def __init__(self) -> None:
        self.sent: list[Any] = []

    async def send_all(self, records: list[Any]) -> list[Any]:
        self.sent.extend(records)
        return [object() for _ in records]


def waiting(offset: int, deadline_in_s: float) -> InHand:
    now = time.time()
    return InHand(
        topic=TOPIC,
        partition=0,
        offset=offset,
        tier="batch",
        request_id=f"r{offset}",
        reply_to="inferbus.results",
        model="demo-mlp",
        tenant=None,
        headers=[],
        record_ts_ms=now * 1000,
        polled_at_s=now,
        polled_ns=time.time_ns(),
        deadline_s=now + deadline_in_s,
    )


def stalled_pipeline(host: Any) -> tuple[Pipeline, Batcher[InHand], Capture, OffsetTracker]:
    """A pipeline whose batches never fill and whose batch delay is far away."""
    batcher: Batcher[InHand] = Batcher(BatchPolicy(max_batch_size=64, max_queue_delay_s=60.0))
    capture, offsets = Capture(), OffsetTracker()
    pipeline = Pipeline(
        settings=WorkerSettings(model="demo-mlp"),
        instance_id="worker-test",
        host=host,
        batcher=batcher,
        publisher=capture,  # type: ignore[arg-type]
        offsets=offsets,
        groups={"batch": "inferbus.workers.demo-mlp.batch"},
    )
    return pipeline, batcher, capture, offsets


async def test_an_expired_request_in_a_full_batcher_is_answered_within_a_sweep() -> None:
    # A batch that never fills and a delay far away: only the sweep can answer them.
    pipeline, batcher, capture, offsets = stalled_pipeline(BusyHost())
    items = [waiting(0, 0.2), waiting(1, 0.2), waiting(2, 30.0)]
    for item in items:
        item.epoch = pipeline.took(TOPIC, 0, item.offset)
        batcher.add(item, tier="batch", samples=1, length=None, now=time.monotonic())
    loop = asyncio.create_task(pipeline.engine_loop())
    try:
        await asyncio.sleep(0.2 + 2 * EXPIRY_SWEEP_S + 0.1)
    finally:
        loop.cancel()
    answered = {orjson.loads(r.value)["request_id"]: orjson.loads(r.value) for r in capture.sent}
    assert set(answered) == {"r0", "r1"}
    assert all(a["status"] == "deadline_exceeded" for a in answered.values())
    assert len(batcher) == 1 and pipeline.in_hand == 1  # the live one still waits
    assert offsets.committable() == {(TOPIC, 0): 2}


@dataclass
class MlpVersion:
    version: str = "1"
    config: Any = field(default_factory=mlp_config)


class PollingHost(BusyHost):
    version = MlpVersion()  # type: ignore[assignment]
    tokenize = None
    index_limits: dict[str, int] = {}


def polled(offset: int, deadline_ms: float) -> ConsumerRecord[bytes, bytes]:
    value = orjson.dumps(
        {
            "request_id": f"r{offset}",
            "model": "demo-mlp",
            "inputs": {"x": {"dtype": "float32", "shape": [1, 16], "data": [[0.5] * 16]}},
            "reply_to": "inferbus.results",
        }
    )
    return ConsumerRecord(
        topic=TOPIC,
        partition=0,
        offset=offset,
        timestamp=int(time.time() * 1000),
        timestamp_type=0,
        key=None,
        value=value,
        checksum=None,
        serialized_key_size=0,
        serialized_value_size=len(value),
        headers=[(h.DEADLINE, str(deadline_ms).encode())],
    )


async def test_a_request_that_expired_in_kafka_is_answered_at_poll() -> None:
    # The engine never frees and the batcher's delay is far away: only the poll can answer.
    pipeline, batcher, capture, offsets = stalled_pipeline(PollingHost())
    now_ms = time.time() * 1000
    pipeline.take([polled(0, now_ms - 7000), polled(1, now_ms + 30_000)], "batch")
    for _ in range(20):
        await asyncio.sleep(0.01)
        if capture.sent:
            break
    answered = [orjson.loads(r.value) for r in capture.sent]
    assert [(a["request_id"], a["status"]) for a in answered] == [("r0", "deadline_exceeded")]
    assert batcher.queued_samples("batch") == 1  # only the live one takes room
    assert offsets.committable() == {(TOPIC, 0): 1}


async def test_a_record_whose_decoding_raises_is_dead_lettered_and_the_poll_goes_on(
    monkeypatch: Any,
) -> None:
    # A defect in the worker's decoding (not a bad event) must not kill the poll loop or
    # leave the record in hand: it goes to the DLQ with its bytes and `internal_error`.
    import services.worker.pipeline as pipeline_module

    real = pipeline_module.decode_record

    def decode_record(record: ConsumerRecord[bytes, bytes], **kwargs: Any) -> InHand:
        if record.offset == 1:
            raise ZeroDivisionError("decoder defect")
        return real(record, **kwargs)

    monkeypatch.setattr(pipeline_module, "decode_record", decode_record)
    pipeline, batcher, capture, offsets = stalled_pipeline(PollingHost())
    far = time.time() * 1000 + 30_000
    records = [polled(0, far), polled(1, far), polled(2, far)]
    pipeline.take(records, "batch")
    for _ in range(20):
        await asyncio.sleep(0.01)
        if capture.sent:
            break
    [dead] = capture.sent
    assert dead.topic == "inferbus.dlq"
    assert dead.value == records[1].value, "the record's own bytes"
    assert h.header(dead.headers, h.ERROR_CODE) == "internal_error"
    assert "ZeroDivisionError: decoder defect" in (h.header(dead.headers, h.ERROR_MESSAGE) or "")
    assert batcher.queued_samples("batch") == 2, "the others are queued"
    assert pipeline.in_hand == 2
    assert offsets.committable() == {(TOPIC, 0): 0}, "offset 0 is still in the batcher"


class OneBatchHost(PollingHost):
    """An engine that takes a batch and never finishes it."""

    def __init__(self) -> None:
        self.batches = 0

    async def run(self, *args: Any, **kwargs: Any) -> Any:
        self.batches += 1
        await asyncio.Event().wait()


async def test_a_due_partial_batch_behind_a_running_one_waits_without_spinning() -> None:
    # One batch in the engine, a partial one past its delay: it waits for the engine to free
    # (which wakes the loop) instead of looping with a zero timeout until then.
    host = OneBatchHost()
    batcher: Batcher[InHand] = Batcher(BatchPolicy(max_batch_size=2, max_queue_delay_s=0.001))
    pipeline = Pipeline(
        settings=WorkerSettings(model="demo-mlp"),
        instance_id="worker-test",
        host=host,  # type: ignore[arg-type]
        batcher=batcher,
        publisher=Capture(),  # type: ignore[arg-type]
        offsets=OffsetTracker(),
        groups={"batch": "inferbus.workers.demo-mlp.batch"},
    )
    for offset in range(3):  # a full batch for the engine, then one left over
        batcher.add(waiting(offset, 30.0), tier="batch", samples=1, length=None, now=0.0)
    rounds = 0
    next_batch = batcher.next_batch

    def counted(now: float, *, full_only: bool = False) -> Any:
        nonlocal rounds
        rounds += 1
        return next_batch(now, full_only=full_only)

    batcher.next_batch = counted  # type: ignore[method-assign]
    loop = asyncio.create_task(pipeline.engine_loop())
    try:
        await asyncio.sleep(0.3)
    finally:
        loop.cancel()
    assert host.batches == 1
    assert len(batcher) == 1, "the partial batch still waits for the engine"
    assert rounds <= 5, f"the loop went round {rounds} times in 0.3 s"


class CountingHost(BusyHost):
    """An engine that counts the batches it is handed."""

    def __init__(self) -> None:
        self.batches = 0

    async def run(self, *args: Any, **kwargs: Any) -> Any:
        self.batches += 1
        await asyncio.Event().wait()


async def test_a_lapsed_lease_lets_the_queue_go_instead_of_running_it() -> None:
    """Regression: a worker frozen past its lease ran its whole queue the moment it went on,
    though another worker had taken the partitions: 101-401 repeats in `inferbus chaos -s
    worker-freeze`. Let go, the records stay uncommitted for their next owner."""
    host = CountingHost()
    batcher: Batcher[InHand] = Batcher(BatchPolicy(max_batch_size=2, max_queue_delay_s=0.0))
    capture, offsets = Capture(), OffsetTracker()
    lapsed = True
    pipeline = Pipeline(
        settings=WorkerSettings(model="demo-mlp"),
        instance_id="worker-test",
        host=host,  # type: ignore[arg-type]
        batcher=batcher,
        publisher=capture,  # type: ignore[arg-type]
        offsets=offsets,
        groups={"batch": "inferbus.workers.demo-mlp.batch"},
        lease_lapsed=lambda: lapsed,
    )
    for offset in range(5):
        item = waiting(offset, 30.0)
        item.epoch = pipeline.took(TOPIC, 0, item.offset)
        batcher.add(item, tier="batch", samples=1, length=None, now=time.monotonic())
    loop = asyncio.create_task(pipeline.engine_loop())
    try:
        await asyncio.sleep(0.1)
        assert (host.batches, len(batcher), pipeline.in_hand) == (0, 0, 0)
        assert capture.sent == []
        assert offsets.committable().get((TOPIC, 0), 0) == 0  # read again from offset 0
        lapsed = False  # a fresh record: what comes now runs
        item = waiting(5, 30.0)
        item.epoch = pipeline.took(TOPIC, 0, item.offset)
        batcher.add(item, tier="batch", samples=1, length=None, now=time.monotonic())
        pipeline.wakeup.set()
        await asyncio.sleep(0.1)
        assert host.batches == 1
    finally:
        loop.cancel()
