"""aiokafka's own fetcher builds each fetch with the pacer's live wait and least bytes; a
held consumer still gets its records, and a gathering one a record that comes alone."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from infra.kafka import make_consumer, make_producer
from infra.pacing import FetchPacer, record_bytes
from infra.settings import kafka_settings
from infra.topics import TopicSpec, ensure_topics

pytestmark = pytest.mark.integration


@contextlib.asynccontextmanager
async def _one_partition(
    broker: str, name: str
) -> AsyncIterator[tuple[str, AIOKafkaConsumer, AIOKafkaProducer]]:
    """A fresh 1-partition topic, a consumer assigned to it from its start, and a producer."""
    topic = f"{name}-{uuid.uuid4().hex[:8]}"
    await ensure_topics(broker, [TopicSpec(topic, 1)])
    tp = TopicPartition(topic, 0)
    consumer = make_consumer(bootstrap=broker, group_id=None, client_id=name)
    producer = make_producer(bootstrap=broker, client_id=name)
    await consumer.start()
    await producer.start()
    try:
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        yield topic, consumer, producer
    finally:
        await consumer.stop()
        await producer.stop()


async def test_a_held_consumer_fetches_with_the_live_wait(broker: str) -> None:
    async with _one_partition(broker, "pacing") as (topic, consumer, producer):
        pacer = FetchPacer(consumer)
        assert pacer.attach()
        fetcher = consumer._fetcher
        assert fetcher._fetch_max_wait_ms == pacer.wait_ms
        pacer.hold_until(time.monotonic() + 0.15)
        assert 100 <= fetcher._fetch_max_wait_ms <= 145
        await producer.send_and_wait(topic, b"held", partition=0)
        got: list[bytes] = []
        deadline = time.monotonic() + 5.0
        while not got and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=500)
            got = [r.value for records in batches.values() for r in records if r.value]
        assert got == [b"held"]
        await asyncio.sleep(0.2)
        assert fetcher._fetch_max_wait_ms == pacer.wait_ms  # the hold has passed


async def test_a_gathering_consumer_asks_for_several_records_and_still_gets_a_lone_one(
    broker: str,
) -> None:
    """While a stream flows, each fetch asks for a few records' bytes (`fetch_min_bytes`);
    a record that then comes alone is still answered by the wait's end, not held."""
    async with _one_partition(broker, "gather") as (topic, consumer, producer):
        settings = kafka_settings().model_copy(update={"fetch_gather_share": 1.0})
        pacer = FetchPacer(consumer, settings, gather=True)
        assert pacer.attach()
        got: list[tuple[float, bytes]] = []
        asked: list[int] = []
        lone = asyncio.Event()

        async def read() -> None:
            while True:
                batches = await consumer.getmany(timeout_ms=100)
                records = [r for rs in batches.values() for r in rs]
                pacer.observe(len(records), record_bytes(records))
                asked.append(consumer._fetcher._fetch_min_bytes)
                got.extend((time.monotonic(), r.value or b"") for r in records)
                if any(r.value == b"lone" for r in records):
                    lone.set()

        reader = asyncio.create_task(read())
        try:
            for _ in range(60):  # ~400 a second: 4 records every 10 ms
                for _ in range(4):
                    await producer.send(topic, b"x" * 500, partition=0)
                await asyncio.sleep(0.01)
            await producer.flush()
            assert max(asked) >= 2 * 500, f"never asked for more than one record: {set(asked)}"
            await asyncio.sleep(0.05)
            sent_at = time.monotonic()
            await producer.send_and_wait(topic, b"lone", partition=0)
            await asyncio.wait_for(lone.wait(), 5.0)
            [arrived] = [at for at, value in got if value == b"lone"]
            assert arrived - sent_at < 1.0  # the wait is at most 20 ms while records flow
            assert len(got) == 241
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader


async def test_bursts_in_a_rhythm_cost_about_two_fetches_each_and_arrive_on_time(
    broker: str,
) -> None:
    """Bursts every 150 ms (a closed-loop producer, workers answering per engine run): once
    the rhythm is learned, a fetch waits past the next burst instead of coming back empty
    every 40 ms, and each burst still reaches the reader soon after it is sent."""
    async with _one_partition(broker, "rhythm") as (topic, consumer, producer):
        pacer = FetchPacer(
            consumer,
            kafka_settings().model_copy(update={"fetch_rhythm_tolerance": 0.3}),
            rhythm=True,
        )
        assert pacer.attach()
        built: list[int] = []
        live_wait = pacer.current_wait_ms

        def counted() -> int:
            built.append(live_wait())
            return built[-1]

        pacer.current_wait_ms = counted  # type: ignore[method-assign]
        arrivals: dict[bytes, float] = {}

        async def read() -> None:
            while True:
                batches = await consumer.getmany(timeout_ms=100)
                records = [r for rs in batches.values() for r in rs]
                pacer.observe(len(records), record_bytes(records))
                now = time.monotonic()
                for record in records:
                    arrivals.setdefault(record.value or b"", now)

        reader = asyncio.create_task(read())
        sent: dict[bytes, float] = {}
        try:
            builds_at_burst: list[int] = []
            for burst in range(24):
                builds_at_burst.append(len(built))
                marker = f"burst-{burst}".encode()
                sent[marker] = time.monotonic()
                for _ in range(7):
                    await producer.send(topic, b"x" * 200, partition=0)
                await producer.send_and_wait(topic, marker, partition=0)
                await asyncio.sleep(0.15 - (time.monotonic() - sent[marker]))
            await asyncio.sleep(0.5)
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
        assert set(arrivals) >= set(sent), "a burst never arrived"
        late = {m: round(arrivals[m] - sent[m], 3) for m in sent if arrivals[m] - sent[m] > 0.12}
        assert not late, f"bursts that reached the reader late: {late}"
        learned = built[builds_at_burst[14] : builds_at_burst[23]]
        # without the rhythm a 150 ms gap costs ~4 fetches at the 40 ms busy cap; with it,
        # one at the step (for the rest of the burst) and one parked until the next
        assert len(learned) <= 9 * 2.5, f"{len(learned)} fetches for 9 gaps: {learned}"
        assert max(built) > kafka_settings().fetch_wait_busy_max_ms, "no fetch waited for a burst"
