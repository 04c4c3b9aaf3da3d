"""A reader tailing one partition sees every record while many producers write it.

On the embedded broker (Tansu 0.6) a batch can become readable after a later one was
returned; a plain tailing reader misses it (scripts/probe_tail_reader.py). Read through
`infra.gaps`, the same reader misses none.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from typing import Any

import pytest
from aiokafka import TopicPartition

from infra.gaps import GapGuard, admit_in_order
from infra.kafka import make_consumer, make_producer
from infra.topics import TopicSpec, ensure_topics

pytestmark = pytest.mark.integration

PRODUCERS, TASKS, RECORDS, BATCH = 8, 4, 150, 2


async def _write(producer: Any, topic: str, name: str) -> None:
    for first in range(0, RECORDS, BATCH):
        batch = producer.create_batch()
        for n in range(first, first + BATCH):
            batch.append(key=None, value=f"{name}-{n}".encode(), timestamp=None)
        await (await producer.send_batch(batch, topic, partition=0))


async def test_a_guarded_tail_reader_sees_every_record(broker: str) -> None:
    topic = f"gaps-{uuid.uuid4().hex[:8]}"
    await ensure_topics(broker, [TopicSpec(topic, 1)])
    tp = TopicPartition(topic, 0)
    reader = make_consumer(bootstrap=broker, group_id=None, client_id="gaps-tail")
    await reader.start()
    reader.assign([tp])
    await reader.seek_to_beginning(tp)
    guard, seen = GapGuard(), set[bytes]()
    offsets: list[int] = []
    expected = PRODUCERS * TASKS * RECORDS
    done, complete = asyncio.Event(), asyncio.Event()

    async def tail() -> None:
        while not done.is_set():
            fetched = await reader.getmany(timeout_ms=50)
            for records in admit_in_order(reader, guard, fetched, time.monotonic()).values():
                offsets.extend(record.offset for record in records)
                seen.update(record.value for record in records)
            if len(seen) >= expected:
                complete.set()

    writers = [make_producer(broker, client_id=f"gaps-{i}") for i in range(PRODUCERS)]
    following = asyncio.create_task(tail())
    try:
        for writer in writers:
            await writer.start()
        await asyncio.gather(
            *(_write(w, topic, f"{i}.{j}") for i, w in enumerate(writers) for j in range(TASKS))
        )
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(complete.wait(), 20)
    finally:
        done.set()
        await following
        await reader.stop()
        for writer in writers:
            await writer.stop()
    assert len(seen) == expected, f"missed {expected - len(seen)} (gaps filled {guard.gaps_filled})"
    assert offsets == sorted(offsets), "records were handed on out of offset order"
    assert len(offsets) == len(set(offsets)), "a record was handed on twice"
