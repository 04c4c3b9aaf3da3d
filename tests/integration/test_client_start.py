"""A client starts at its reply topic's end: on Tansu, which reports a log's end as its last
batch's first offset + 1, the rest of a last batch of several results is old, not new."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from infra.kafka import make_producer
from infra.topics import TopicSpec, ensure_topics
from services.client import InferenceClient
from services.runtime.result_wire import encode_result

pytestmark = pytest.mark.integration


async def test_a_client_seeing_all_results_yields_none_from_before_its_start(broker: str) -> None:
    topic = f"inferbus.results.start-{uuid.uuid4().hex[:8]}"
    await ensure_topics(broker, [TopicSpec(topic, 1)])
    producer = make_producer(broker, client_id="old-results")
    await producer.start()
    try:
        batch = producer.create_batch()  # five old results in one record batch
        for n in range(5):
            value = encode_result(request_id=f"old-{n}", model="m", status="ok", outputs={})
            batch.append(key=None, value=value, timestamp=None)
        await (await producer.send_batch(batch, topic, partition=0))

        async with InferenceClient(broker, reply_to=topic, see_all_results=True) as client:
            new = encode_result(request_id="new", model="m", status="ok", outputs={})
            await producer.send_and_wait(topic, new, partition=0)
            stream = client.results()
            first = await asyncio.wait_for(anext(stream), 15)
    finally:
        await producer.stop()
    assert first.request_id == "new", f"an old result came first: {first.request_id}"
