"""The client's edges on a real broker, results written by the test in place of a worker: an
id awaited twice, a stop while requests wait, a `results()` loop at stop, the sync client
closed twice."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest
from aiokafka.errors import KafkaTimeoutError
from typer.testing import CliRunner

from infra.broker import EmbeddedBroker
from infra.kafka import make_producer
from infra.topics import TopicSpec, ensure_topics
from schemas.topics import ingest_topic
from services.cli.main import app
from services.client import ClientStopped, InferenceClient, SyncInferenceClient
from services.runtime.result_wire import encode_result

pytestmark = pytest.mark.integration

X = np.ones((1, 16), dtype=np.float32)


@pytest.fixture
async def reply_topic(broker: str) -> AsyncIterator[str]:
    topic = f"inferbus.results.life-{uuid.uuid4().hex[:8]}"
    await ensure_topics(broker, [TopicSpec(topic, 1), TopicSpec(ingest_topic("interactive"), 1)])
    yield topic


async def _answer(broker: str, topic: str, request_id: str) -> None:
    """What a worker would write for `request_id`."""
    producer = make_producer(broker, client_id="fake-worker")
    await producer.start()
    try:
        value = encode_result(request_id=request_id, model="demo-mlp", status="ok", outputs={})
        await producer.send_and_wait(topic, value, partition=0)
    finally:
        await producer.stop()


async def test_an_id_awaited_twice_gets_its_result_in_both(broker: str, reply_topic: str) -> None:
    """A retry of an id whose first `infer` still waited: the first timed out although its
    result came (the second took its place, then removed it)."""
    async with InferenceClient(broker, reply_to=reply_topic) as client:
        request = client.build_request("demo-mlp", {"x": X}, request_id=f"twice-{uuid.uuid4()}")
        first = asyncio.create_task(client.infer(request, timeout_s=20))
        second = asyncio.create_task(client.infer(request, timeout_s=20))
        await asyncio.sleep(1.0)  # both sent and waiting
        await _answer(broker, reply_topic, request.request_id)
        results = await asyncio.gather(first, second)
    assert [r.status for r in results] == ["ok", "ok"]


async def test_a_stop_ends_waiting_requests_and_results_loops(
    broker: str, reply_topic: str
) -> None:
    """`stop()` left a `results()` loop waiting for good, and a waiting `infer` raised a bare
    CancelledError; a call after it raised aiokafka's empty ProducerClosed."""
    client = InferenceClient(broker, reply_to=reply_topic)
    await client.start()

    async def drain() -> int:
        return sum([1 async for _ in client.results()])

    loop = asyncio.create_task(drain())
    waiting = asyncio.create_task(
        client.infer(client.build_request("demo-mlp", {"x": X}), timeout_s=30)
    )
    await asyncio.sleep(1.0)
    await client.stop()
    assert await asyncio.wait_for(loop, 5) == 0
    with pytest.raises(ClientStopped, match="stopped before request"):
        await asyncio.wait_for(waiting, 5)
    with pytest.raises(ClientStopped, match="is stopped"):
        await client.submit(client.build_request("demo-mlp", {"x": X}))
    await client.stop()  # twice: harmless


async def test_the_sync_client_closes_once_and_refuses_calls_after(
    broker: str, reply_topic: str
) -> None:
    """Closing twice, or calling after `close()`, blocked for good."""

    def use() -> None:
        client = SyncInferenceClient(broker, reply_to=reply_topic)
        client.close()
        client.close()
        with pytest.raises(ClientStopped, match="closed"):
            client.infer("demo-mlp", {"x": X}, timeout_s=2)

    await asyncio.wait_for(asyncio.to_thread(use), 60)


async def test_a_reply_topic_of_ones_own_is_created_as_the_client_error_says(
    broker: str, demo_models: Path
) -> None:
    """The client said "create it (inferbus topics create)", which created no such topic."""
    topic = f"inferbus.results.team-{uuid.uuid4().hex[:8]}.app"
    with pytest.raises(RuntimeError, match=f"--reply-topic {re.escape(topic)}"):
        await InferenceClient(broker, reply_to=topic, patience_s=1).start()
    args = ["topics", "create", "--bootstrap", broker, "--models", str(demo_models)]
    result = await asyncio.to_thread(CliRunner().invoke, app, [*args, "--reply-topic", topic])
    assert result.exit_code == 0 and topic in result.output, result.output
    async with InferenceClient(broker, reply_to=topic):
        pass


async def frozen_reply_topic(own: EmbeddedBroker) -> str:
    """A reply topic and the interactive ingest topic on `own` (a broker a test freezes)."""
    topic = f"inferbus.results.frozen-{uuid.uuid4().hex[:8]}"
    specs = [TopicSpec(topic, 1), TopicSpec(ingest_topic("interactive"), 1)]
    await ensure_topics(own.bootstrap, specs)
    return topic


async def test_a_broker_that_never_acks_fails_a_submit_within_its_patience() -> None:
    """A frozen broker (SIGSTOP: connections open, no answers) held a client 8 s patient for
    85 s, aiokafka's request timeout twice; the submit now fails about when its patience
    ends, naming it."""
    with EmbeddedBroker(port=0) as own:
        assert own.pid is not None
        topic = await frozen_reply_topic(own)
        client = InferenceClient(own.bootstrap, reply_to=topic, patience_s=2)
        await client.start()
        try:
            await client.submit(client.build_request("demo-mlp", {"x": X}))
            os.kill(own.pid, signal.SIGSTOP)
            try:
                began = time.monotonic()
                with pytest.raises(KafkaTimeoutError, match="no ack within"):
                    await client.submit(client.build_request("demo-mlp", {"x": X}))
                took = time.monotonic() - began
            finally:
                os.kill(own.pid, signal.SIGCONT)
        finally:
            await client.stop()
    assert 1.5 < took < 8, took


async def test_a_stop_as_the_broker_froze_gives_up_unacknowledged_requests_in_time(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A request sent as the broker froze held the client's stop for aiokafka's request
    timeout (29.5 s); the stop gives it up after its flush timeout now, and the request's
    submit says the client stopped."""
    with EmbeddedBroker(port=0) as own:
        assert own.pid is not None
        topic = await frozen_reply_topic(own)
        client = InferenceClient(own.bootstrap, reply_to=topic, patience_s=60)
        await client.start()
        await client.submit(client.build_request("demo-mlp", {"x": X}))
        os.kill(own.pid, signal.SIGSTOP)
        try:
            sending = asyncio.create_task(client.submit(client.build_request("demo-mlp", {"x": X})))
            await asyncio.sleep(0.5)
            assert not sending.done()
            began = time.monotonic()
            await client.stop(flush_timeout_s=1.0)
            took = time.monotonic() - began
            producer = client._producer
            assert producer is not None
            # Its sender has ended (nothing left running in the background).
            assert producer._sender.sender_task.done()
            with pytest.raises(ClientStopped, match="may or may not have reached it"):
                await sending
        finally:
            os.kill(own.pid, signal.SIGCONT)
    assert took < 5, took
    assert "event=client_stop_gave_up" in caplog.text


def test_infer_on_a_broker_without_the_stacks_topics_says_so_on_one_line(
    demo_models: Path,
) -> None:
    """A bare `inferbus broker` (or `up` before its topics): a Rich traceback of the
    client's RuntimeError, where every expected failure is one `error:` line."""
    x = json.dumps({"x": [[0.5] * 16]})
    with EmbeddedBroker(port=0) as bare:
        args = ["infer", "demo-mlp", "--json", x, "--bootstrap", bare.bootstrap]
        result = CliRunner().invoke(app, [*args, "--models", str(demo_models)])
    assert result.exit_code == 1, result.output
    assert "reply topic 'inferbus.results' does not exist" in result.output
    assert "inferbus topics create" in result.output
    assert "Traceback" not in result.output
