"""A request goes end to end on a real broker: ingest, workers, the client, bad input, faults."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import sys
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
import pytest_asyncio
from aiokafka.producer import message_accumulator
from aiokafka.producer import producer as aiokafka_producer
from aiokafka.record.default_records import _DefaultRecordBatchBuilderPy as PyBatchBuilder

from infra.kafka import make_producer
from infra.models.repository import ModelVersion
from infra.topics import ensure_topics, standard_topics
from schemas import headers as h
from schemas.result import InferenceResult
from schemas.tensors import Arrays
from schemas.topics import DLQ, INGEST, RESULTS, request_topic
from services.client import InferenceClient
from services.ingest.app import IngestService
from services.ingest.limits import TenantLimit
from services.ingest.settings import IngestSettings
from services.models.demo import write_demo_models
from services.worker.app import Worker
from services.worker.engines.base import Engine, EngineInfo
from services.worker.engines.factory import create_engine
from services.worker.settings import WorkerSettings
from tests.integration.stack import add_mlp_version, collect, derive_model, reply_consumer
from tests.unit.infra.test_lenient_fetch import RawHeaderName

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]
POISON = 1234.5


class CountingEngine(Engine):
    """Wraps a real engine: counts the samples it runs, fails batches holding POISON."""

    def __init__(self, inner: Engine) -> None:
        super().__init__(inner.model)
        self.inner = inner
        self.samples = 0

    @property
    def info(self) -> EngineInfo:
        return self.inner.info

    def load(self) -> None:
        self.inner.load()

    def infer(self, inputs: Mapping[str, np.ndarray[Any, Any]]) -> Arrays:
        x = inputs.get("x")
        if x is not None and bool((x == POISON).any()):
            raise RuntimeError("poisoned sample")
        self.samples += next(iter(inputs.values())).shape[0]
        return self.inner.infer(inputs)

    def unload(self) -> None:
        self.inner.unload()


@dataclass
class Stack:
    bootstrap: str
    models: Path
    ingest: IngestService
    mlp_worker: Worker
    engines: list[CountingEngine]


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def stack(broker: str, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    models = tmp_path_factory.mktemp("repo")
    write_demo_models(models)
    derive_model(
        models, "demo-mlp", "tiny-queue", slo={"interactive": {"p99_e2e_ms": 500, "max_queue": 3}}
    )
    derive_model(models, "demo-mlp", "gated", allowed_tenants=["team-a"])
    derive_model(models, "demo-mlp", "drain-mlp")
    derive_model(models, "demo-mlp", "reload-mlp")
    names = ["demo-mlp", "demo-encoder", "tiny-queue", "gated", "drain-mlp", "reload-mlp"]
    await ensure_topics(broker, standard_topics(names))
    engines: list[CountingEngine] = []

    def counting(version: ModelVersion) -> Engine:
        engine = CountingEngine(create_engine(version))
        engines.append(engine)
        return engine

    greedy = TenantLimit(rate_rps=0.1, burst=2)
    steady = TenantLimit(rate_rps=1, burst=1)
    ingest = IngestService(
        broker,
        IngestSettings(
            models_dir=models,
            queue_refresh_ms=200,
            tenant_limits={"greedy": greedy, "steady": steady},
        ),
    )
    await ingest.start()
    mlp = Worker(
        broker,
        WorkerSettings(model="demo-mlp", tiers=["critical", "interactive"], models_dir=models),
        engine_factory=counting,
    )
    encoder = Worker(broker, WorkerSettings(model="demo-encoder", models_dir=models))
    await asyncio.gather(mlp.start(), encoder.start())
    await asyncio.wait_for(ingest.ready.wait(), 60)
    yield Stack(broker, models, ingest, mlp, engines)
    await asyncio.gather(mlp.stop(), encoder.stop(), ingest.stop())


def mlp_session(stack: Stack, name: str = "demo-mlp", version: str = "1") -> ort.InferenceSession:
    return ort.InferenceSession(str(stack.models / name / version / "model.onnx"))


def raw_event(
    request_id: str, x: np.ndarray[Any, Any], *, b64: bool = False, **fields: Any
) -> bytes:
    tensor: dict[str, Any] = {"dtype": "float32", "shape": list(x.shape)}
    if b64:
        tensor["b64"] = base64.b64encode(x.astype("<f4").tobytes()).decode()
    else:
        tensor["data"] = x.tolist()
    event = {
        "schema_version": 1,
        "request_id": request_id,
        "model": "demo-mlp",
        "inputs": {"x": tensor},
    }
    event.update(fields)
    return json.dumps(event).encode()


def by_request_id(pair: tuple[Any, Any]) -> str | None:
    _, item = pair
    return item.get("request_id") if isinstance(item, dict) else None


async def test_infer_returns_what_onnxruntime_computes(stack: Stack) -> None:
    x = np.random.default_rng(3).random((2, 16), dtype=np.float32)
    async with InferenceClient(stack.bootstrap) as client:
        result = await client.infer(client.build_request("demo-mlp", {"x": x}), timeout_s=60)
        text = await client.infer(
            client.build_request("demo-encoder", {"text": "hello bus"}), timeout_s=60
        )
    assert result.status == "ok", result.error
    expected = mlp_session(stack).run(None, {"x": x})[0]
    np.testing.assert_allclose(result.outputs["y"].to_numpy(), expected, rtol=1e-5, atol=1e-6)
    assert result.model_version == "1" and result.batch_size is not None
    assert result.timings.e2e_ms is not None and result.timings.infer_ms is not None
    assert text.status == "ok", text.error
    assert text.outputs["embedding"].shape == [1, 256]


async def test_critical_requests_are_answered_through_their_own_ingest_lane(
    stack: Stack,
) -> None:
    """`inferbus.ingest.critical` is read by ingest's latency-first consumer; its requests
    reach the critical tier and are answered, interleaved with interactive ones."""
    rng = np.random.default_rng(5)
    xs = [rng.random((1, 16), dtype=np.float32) for _ in range(6)]
    async with InferenceClient(stack.bootstrap) as client:
        results = await asyncio.gather(
            *(
                client.infer(
                    client.build_request(
                        "demo-mlp", {"x": x}, tier="critical" if i % 2 else "interactive"
                    ),
                    timeout_s=60,
                )
                for i, x in enumerate(xs)
            )
        )
        assert not client._mine.any_urgent_due(), "an answered critical request still counts"
    expected = mlp_session(stack).run(None, {"x": np.concatenate(xs)})[0]
    for i, result in enumerate(results):
        assert result.status == "ok", result.error
        np.testing.assert_allclose(
            result.outputs["y"].to_numpy()[0], expected[i], rtol=1e-5, atol=1e-6
        )


async def test_outside_producer_gets_200_correct_results(stack: Stack) -> None:
    rng = np.random.default_rng(11)
    inputs = {
        f"outside-{uuid.uuid4().hex}": rng.random((1, 16), dtype=np.float32) for _ in range(200)
    }
    reader = await reply_consumer(stack.bootstrap, RESULTS)
    producer = make_producer(stack.bootstrap)
    await producer.start()
    try:
        for i, (rid, x) in enumerate(inputs.items()):
            await producer.send(INGEST, raw_event(rid, x, b64=i % 2 == 0), key=rid.encode())
        await producer.flush()
        found = await collect(reader, inputs, key=by_request_id, timeout_s=90)
    finally:
        await producer.stop()
        await reader.stop()
    session = mlp_session(stack)
    for rid, (_, result) in found.items():
        assert result["status"] == "ok", result
        got = InferenceResult.model_validate(result).outputs["y"].to_numpy()
        np.testing.assert_allclose(
            got, session.run(None, {"x": inputs[rid]})[0], rtol=1e-5, atol=1e-6
        )


X16 = [[0.5] * 16]
BAD_CASES = [
    pytest.param(
        {"model": "nope", "inputs": {"x": {"dtype": "float32", "shape": [1, 16], "data": X16}}},
        "model_not_found",
        "nope",
        id="unknown-model",
    ),
    pytest.param(
        {
            "model": "demo-mlp",
            "model_version": "9",
            "inputs": {"x": {"dtype": "float32", "shape": [1, 16], "data": X16}},
        },
        "model_not_found",
        "version",
        id="unknown-version",
    ),
    pytest.param(
        {
            "model": "demo-mlp",
            "inputs": {"x": {"dtype": "int64", "shape": [1, 16], "data": [[1] * 16]}},
        },
        "invalid_input",
        "float32",
        id="wrong-dtype",
    ),
    pytest.param(
        {
            "model": "demo-mlp",
            "inputs": {"x": {"dtype": "float32", "shape": [1, 8], "data": [[0.5] * 8]}},
        },
        "invalid_input",
        "shape",
        id="wrong-shape",
    ),
    pytest.param(
        {"model": "demo-mlp", "inputs": {"x": {"dtype": "float32", "shape": [0, 16], "data": []}}},
        "invalid_input",
        "empty",
        id="empty-batch",
    ),
    pytest.param(
        {
            "model": "demo-mlp",
            "inputs": {"x": {"dtype": "float32", "shape": [1, 16], "data": [[float("nan")] * 16]}},
        },
        "invalid_input",
        "NaN",
        id="nan",
    ),
    pytest.param(
        {
            "model": "demo-mlp",
            "tier": "urgent",
            "inputs": {"x": {"dtype": "float32", "shape": [1, 16], "data": X16}},
        },
        "invalid_input",
        "tier",
        id="unknown-tier",
    ),
    pytest.param(
        {
            "model": "demo-mlp",
            "reply_to": "bad topic!",
            "inputs": {"x": {"dtype": "float32", "shape": [1, 16], "data": X16}},
        },
        "invalid_input",
        "reply_to",
        id="illegal-reply-to",
    ),
    pytest.param({"model": "demo-mlp"}, "invalid_input", "inputs", id="missing-inputs"),
    pytest.param(
        {
            "model": "demo-mlp",
            "inputs": {"x": {"dtype": "float32", "shape": [1, 16], "b64": "AAAA"}},
        },
        "invalid_input",
        "bytes",
        id="short-b64",
    ),
    pytest.param(
        {
            "model": "demo-mlp",
            "inputs": {"x": {"dtype": "float32", "shape": [1, 16], "data": X16}},
            "deadline": "2001-01-01T00:00:00Z",
        },
        "deadline_exceeded",
        "deadline",
        id="expired",
    ),
    pytest.param(
        {
            "model": "gated",
            "tenant": "team-b",
            "inputs": {"x": {"dtype": "float32", "shape": [1, 16], "data": X16}},
        },
        "unauthorized",
        "team-b",
        id="tenant-not-allowed",
    ),
    pytest.param(
        {
            "model": "demo-mlp",
            "inputs": {"x": {"dtype": "float32", "shape": [1, 16], "data": X16}},
            "metadata": {"pad": "x" * 1_100_000},
        },
        "invalid_input",
        "limit",
        id="oversized-event",
    ),
    pytest.param(
        {"model": "demo-mlp", "inputs": {"text": {"text": "hi"}}},
        "invalid_input",
        "tokenizer",
        id="text-without-tokenizer",
    ),
]


async def test_a_tenant_over_its_rate_limit_is_answered_overloaded(stack: Stack) -> None:
    """The stack's ingest lets tenant `greedy` send 2 at once, then one per 10 s."""
    x = np.ones((1, 16), dtype=np.float32)
    async with (
        InferenceClient(stack.bootstrap, tenant="greedy") as greedy,
        InferenceClient(stack.bootstrap, tenant="team-a") as modest,
    ):
        results = await asyncio.gather(
            *(greedy.infer(greedy.build_request("demo-mlp", {"x": x})) for _ in range(6))
        )
        other = await modest.infer(modest.build_request("demo-mlp", {"x": x}))
    statuses = sorted(r.status for r in results)
    assert statuses.count("ok") in (2, 3), statuses  # the burst, plus a token at most
    refused = [r for r in results if r.status == "rejected_overload"]
    assert len(refused) == 6 - statuses.count("ok"), statuses
    assert all(r.error is not None and "greedy" in r.error.message for r in refused)
    assert other.status == "ok"  # other tenants keep their own buckets


async def test_a_backlog_within_a_tenants_limit_is_judged_as_it_was_sent(stack: Stack) -> None:
    """A tenant within its limit was refused after an ingest restart: what waited for ingest
    arrived at once on its clock. Here 12 requests of tenant `steady` (1/s, burst 1), one
    every 1.25 s by their record timestamps, reach ingest together on several partitions."""
    x = np.ones((1, 16), dtype=np.float32)
    start_ms = int(time.time() * 1000) - 20_000
    sent = {f"steady-{uuid.uuid4().hex}": start_ms + i * 1250 for i in range(12)}
    results = await reply_consumer(stack.bootstrap, RESULTS)
    producer = make_producer(stack.bootstrap)
    await producer.start()
    try:
        batch = [
            producer.send(
                INGEST,
                raw_event(rid, x, tenant="steady"),
                key=rid.encode(),
                timestamp_ms=at_ms,
            )
            for rid, at_ms in sent.items()
        ]
        await asyncio.gather(*batch)
        await producer.flush()
        answered = await collect(results, sent, key=by_request_id, timeout_s=60)
    finally:
        await producer.stop()
        await results.stop()
    statuses = [result["status"] for _, result in answered.values()]
    assert statuses == ["ok"] * 12, statuses


async def test_bad_events_get_named_results_or_land_in_the_dlq(stack: Stack) -> None:
    cases = {f"bad-{uuid.uuid4().hex}": case for case in BAD_CASES}
    marker = uuid.uuid4().hex
    unparseable = [
        b"{not json " + marker.encode(),
        json.dumps([marker]).encode(),
        json.dumps({"model": marker}).encode(),
    ]
    results = await reply_consumer(stack.bootstrap, RESULTS)
    dlq = await reply_consumer(stack.bootstrap, DLQ)
    producer = make_producer(stack.bootstrap)
    await producer.start()
    try:
        for rid, case in cases.items():
            event = {"schema_version": 1, "request_id": rid, **case.values[0]}
            await producer.send(INGEST, json.dumps(event).encode(), key=rid.encode())
        for raw in unparseable:
            await producer.send(INGEST, raw)
        await producer.flush()
        answered = await collect(results, cases, key=by_request_id, timeout_s=60)
        dead = await collect(
            dlq,
            [raw.decode() for raw in unparseable],
            key=lambda pair: pair[0].value.decode(),
            parse=lambda value: value,
        )
    finally:
        await producer.stop()
        await results.stop()
        await dlq.stop()
    for rid, case in cases.items():
        _, status, words = case.values
        _, result = answered[rid]
        assert result["status"] == status, (case.id, result)
        assert words in result["error"]["message"], (case.id, result["error"])
    for record, _ in dead.values():
        assert h.header(record.headers, h.ERROR_CODE) == "unparseable"
        assert h.header(record.headers, h.SOURCE_TOPIC) == INGEST
        assert h.header(record.headers, h.ERROR_MESSAGE)


async def test_a_header_name_that_is_not_utf8_does_not_stop_its_partition(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: aiokafka's reader raised on the header name at every poll, so the
    partition stopped for good and nothing after the record was answered."""
    # aiokafka's Python record builder writes the name's bytes as they are.
    for module in (message_accumulator, aiokafka_producer):
        monkeypatch.setattr(module, "DefaultRecordBatchBuilder", PyBatchBuilder)
    rids = [f"hdr-{i}-{uuid.uuid4().hex}" for i in range(3)]
    x = np.full((1, 16), 0.25, dtype=np.float32)
    results = await reply_consumer(stack.bootstrap, RESULTS)
    producer = make_producer(stack.bootstrap)
    await producer.start()
    try:
        for i, rid in enumerate(rids):
            headers = [(RawHeaderName(b"\xff\xfebad-name"), b"v")] if i == 1 else []
            await producer.send_and_wait(
                INGEST, raw_event(rid, x), key=rid.encode(), partition=0, headers=headers
            )
        answered = await collect(results, rids, key=by_request_id, timeout_s=60)
    finally:
        await producer.stop()
        await results.stop()
    assert [answered[rid][1]["status"] for rid in rids] == ["ok", "ok", "ok"]


async def test_requests_a_producer_compressed_are_answered(stack: Stack) -> None:
    """Regression: Java, Go and librdkafka producers often compress (lz4, zstd, snappy);
    without cramjam ingest dead-lettered every such request `unparseable`."""
    x = np.full((1, 16), 0.5, dtype=np.float32)
    results = await reply_consumer(stack.bootstrap, RESULTS)
    rids: dict[str, str] = {}
    try:
        for codec in ("gzip", "snappy", "lz4", "zstd"):
            producer = make_producer(stack.bootstrap, compression_type=codec)
            await producer.start()
            try:
                rid = f"{codec}-{uuid.uuid4().hex}"
                rids[rid] = codec
                await producer.send_and_wait(INGEST, raw_event(rid, x), key=rid.encode())
            finally:
                await producer.stop()
        answered = await collect(results, rids, key=by_request_id, timeout_s=60)
    finally:
        await results.stop()
    assert {rids[rid]: answered[rid][1]["status"] for rid in rids} == dict.fromkeys(
        ("gzip", "snappy", "lz4", "zstd"), "ok"
    )


async def test_worker_answers_records_that_skipped_ingest(stack: Stack) -> None:
    topic = request_topic("demo-mlp", "interactive")
    good, wrong_shape, expired = (f"direct-{n}-{uuid.uuid4().hex}" for n in ("ok", "shape", "late"))
    poisoned = [f"direct-poison-{i}-{uuid.uuid4().hex}" for i in range(4)]
    garbage = b"\x00\xffnot json " + uuid.uuid4().hex.encode()
    before = sum(engine.samples for engine in stack.engines)
    results = await reply_consumer(stack.bootstrap, RESULTS)
    dlq = await reply_consumer(stack.bootstrap, DLQ)
    producer = make_producer(stack.bootstrap)
    await producer.start()
    x = np.full((1, 16), 0.25, dtype=np.float32)
    late_ms = str(int((time.time() - 60) * 1000)).encode()
    try:
        await producer.send(topic, raw_event(good, x), key=good.encode())
        await producer.send(
            topic, raw_event(wrong_shape, np.zeros((1, 3), np.float32)), key=wrong_shape.encode()
        )
        await producer.send(
            topic, raw_event(expired, x), key=expired.encode(), headers=[(h.DEADLINE, late_ms)]
        )
        for i, rid in enumerate(poisoned):
            value = np.full((1, 16), POISON if i == 1 else 0.5, dtype=np.float32)
            # One partition, so the four land in one batch and the poisoned one must be isolated.
            await producer.send(topic, raw_event(rid, value), key=rid.encode(), partition=0)
        await producer.send(topic, garbage, partition=0)
        await producer.flush()
        answered = await collect(
            results, [good, wrong_shape, expired, *poisoned], key=by_request_id
        )
        await collect(dlq, [garbage.hex()], key=lambda pair: pair[0].value.hex(), parse=lambda v: v)
    finally:
        await producer.stop()
        await results.stop()
        await dlq.stop()
    assert answered[good][1]["status"] == "ok"
    assert answered[wrong_shape][1]["status"] == "invalid_input"
    assert answered[expired][1]["status"] == "deadline_exceeded"
    statuses = [answered[rid][1]["status"] for rid in poisoned]
    assert statuses == ["ok", "internal_error", "ok", "ok"], statuses
    assert "poisoned" in answered[poisoned[1]][1]["error"]["message"]
    ran = sum(engine.samples for engine in stack.engines) - before
    assert ran == 4, f"the engine ran {ran} samples: the expired and invalid ones must not reach it"


async def test_a_reply_topic_nobody_created_does_not_hold_back_its_batch_mates(
    stack: Stack,
) -> None:
    """Regression: the worker looked the missing topic up before sending anything, and the
    batch's other results went out 5 s late. They now go first; the lost one goes to the DLQ
    after its lookup."""
    topic = request_topic("demo-mlp", "interactive")
    lost = f"missing-reply-{uuid.uuid4().hex}"
    good = [f"beside-missing-{i}-{uuid.uuid4().hex}" for i in range(3)]
    results = await reply_consumer(stack.bootstrap, RESULTS)
    dlq = await reply_consumer(stack.bootstrap, DLQ)
    producer = make_producer(stack.bootstrap)
    await producer.start()
    x = np.full((1, 16), 0.25, dtype=np.float32)
    try:
        # One partition, so the four are polled, run and published together.
        await producer.send(
            topic, raw_event(lost, x, reply_to=f"nobody-made-{lost}"), key=b"k", partition=0
        )
        for rid in good:
            await producer.send(topic, raw_event(rid, x), key=rid.encode(), partition=0)
        await producer.flush()
        answered = await collect(results, good, key=by_request_id)
        dead = await collect(
            dlq,
            [lost],
            key=lambda pair: pair[0].key.decode() if pair[0].key else None,
            parse=lambda value: value,
        )
    finally:
        await producer.stop()
        await results.stop()
        await dlq.stop()
    assert all(answered[rid][1]["status"] == "ok" for rid in good)
    record, _ = dead[lost]
    assert h.header(record.headers, h.ERROR_CODE) == "undeliverable"
    message = h.header(record.headers, h.ERROR_MESSAGE) or ""
    assert "does not exist" in message and message.count("MissingTopic") == 1, message
    sent_at = max(answered[rid][0].timestamp for rid in good)
    assert sent_at < record.timestamp, "the batch-mates' results went out before the lookup ended"


async def test_a_full_tier_rejects_with_a_named_overload(stack: Stack) -> None:
    # `tiny-queue` has no worker and a bound of 3: the fourth request onwards is rejected.
    ids = [f"flood-{i}-{uuid.uuid4().hex}" for i in range(8)]
    results = await reply_consumer(stack.bootstrap, RESULTS)
    producer = make_producer(stack.bootstrap)
    await producer.start()
    try:
        for rid in ids:
            event = json.loads(raw_event(rid, np.ones((1, 16), np.float32)))
            event["model"] = "tiny-queue"
            # One key, one ingest partition: ingest sees them in this order.
            await producer.send_and_wait(INGEST, json.dumps(event).encode(), key=b"flood")
        rejected = await collect(results, ids[3:], key=by_request_id, timeout_s=60)
    finally:
        await producer.stop()
        await results.stop()
    for rid in ids[3:]:
        result = rejected[rid][1]
        assert result["status"] == "rejected_overload"
        assert "bound of 3" in result["error"]["message"]


async def test_sigterm_under_load_loses_nothing(stack: Stack, tmp_path: Path) -> None:
    model = "drain-mlp"
    topic = request_topic(model, "interactive")
    ids = [f"drain-{i}-{uuid.uuid4().hex}" for i in range(300)]
    command = [
        sys.executable,
        "-m",
        "services.cli.main",
        "worker",
        "--model",
        model,
        "--bootstrap",
        stack.bootstrap,
        "--models",
        str(stack.models),
        "--log-level",
        "WARNING",
    ]
    env = {**os.environ, "INFERBUS_WORKER_MAX_IN_HAND": "64"}
    first = await asyncio.create_subprocess_exec(*command, env=env)
    results = await reply_consumer(stack.bootstrap, RESULTS)
    producer = make_producer(stack.bootstrap)
    await producer.start()
    second = None
    try:
        x = np.full((1, 16), 0.75, dtype=np.float32)
        for rid in ids:
            event = json.loads(raw_event(rid, x))
            event["model"] = model
            await producer.send(topic, json.dumps(event).encode(), key=rid.encode())
        await producer.flush()
        seen: dict[str, Any] = {}
        await collect(results, ids[:1], key=by_request_id, timeout_s=90, seen=seen)
        first.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(first.wait(), 60)
        assert code == 0, f"the draining worker exited with {code}"
        second = await asyncio.create_subprocess_exec(*command, env=env)
        await collect(results, ids, key=by_request_id, timeout_s=150, seen=seen)
    finally:
        await producer.stop()
        await results.stop()
        for process in (first, second):
            if process is not None and process.returncode is None:
                process.send_signal(signal.SIGTERM)
                await asyncio.wait_for(process.wait(), 60)
    assert set(ids) <= set(seen)
    assert all(seen[rid][1]["status"] == "ok" for rid in ids)


async def test_hot_reload_under_load_answers_everything(stack: Stack) -> None:
    model = "reload-mlp"
    worker = Worker(
        stack.bootstrap,
        WorkerSettings(model=model, models_dir=stack.models, reload_check_s=0.2),
    )
    await worker.start()
    x = np.random.default_rng(5).random((1, 16), dtype=np.float32)
    try:
        async with InferenceClient(stack.bootstrap) as client:

            async def one() -> InferenceResult:
                return await client.infer(client.build_request(model, {"x": x}), timeout_s=60)

            first = await asyncio.gather(*(one() for _ in range(20)))
            add_mlp_version(stack.models, model, "2", seed=42)
            during = await asyncio.gather(*(one() for _ in range(60)))
            deadline = time.monotonic() + 30
            while worker.host.version is None or worker.host.version.version != "2":
                assert time.monotonic() < deadline, "version 2 was never switched in"
                await asyncio.sleep(0.1)
            after = await one()
            # A corrupt version is refused: the worker keeps serving version 2.
            broken = stack.models / model / ".3.tmp"
            broken.mkdir()
            (broken / "model.onnx").write_bytes(b"this is not an onnx file")
            broken.rename(stack.models / model / "3")
            await asyncio.sleep(1.0)  # several reload checks (every 0.2 s) see version 3
            still = await one()
    finally:
        await worker.stop()
    assert still.status == "ok" and still.model_version == "2", still
    assert all(r.status == "ok" for r in [*first, *during, after])
    assert {r.model_version for r in first} == {"1"}
    assert after.model_version == "2"
    v1 = mlp_session(stack, model, "1").run(None, {"x": x})[0]
    v2 = mlp_session(stack, model, "2").run(None, {"x": x})[0]
    for result in [*first, *during, after]:
        expected = v1 if result.model_version == "1" else v2
        np.testing.assert_allclose(result.outputs["y"].to_numpy(), expected, rtol=1e-5, atol=1e-6)
