"""How the embedded Tansu answers fetches, measured with a bare aiokafka consumer.

    .venv/bin/python scripts/tansu_fetch_probe.py [--json OUT]

Two questions, each on a fresh topic of the embedded broker (infra.broker):
1. A record produced into a quiet topic 10 to 490 ms after a long fetch (500 ms wait,
   min bytes 1) was sent: how long until the consumer has it? (Answered at arrival, at
   the wait's end, or at some check in between?)
2. A steady stream of small records (one every 2 ms) read with a 20 ms wait: how many
   fetches a second with `fetch_min_bytes` 1 and with 10,000? (Is min bytes honoured?)
Prints one line per case and writes the figures as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from infra.broker import EmbeddedBroker

_SHAPES = {"a.twelve": 12, "b.six": 6, "c.one": 1}
OFFSETS_MS = (10, 60, 130, 200, 240, 300, 360, 400, 450, 490)
"""When, after a waiting fetch was sent, the probe record is produced."""


class _FetchWatch:
    """Counts the fetch requests of every aiokafka connection while installed, and signals
    each one sent (`started`, `at`: its send time, monotonic)."""

    def __init__(self) -> None:
        from aiokafka import conn

        self.n = 0
        self.at = 0.0
        self.started = asyncio.Event()
        self._conn = conn
        self._original = conn.AIOKafkaConnection.send

    def __enter__(self) -> _FetchWatch:
        original = self._original

        def send(connection: Any, request: Any, *args: Any, **kw: Any) -> Any:
            if type(request).__name__.startswith("Fetch"):
                self.n += 1
                self.at = time.monotonic()
                self.started.set()
            return original(connection, request, *args, **kw)

        self._conn.AIOKafkaConnection.send = send  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        self._conn.AIOKafkaConnection.send = self._original  # type: ignore[method-assign]


async def _topics(bootstrap: str, shapes: dict[str, int]) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, n, 1) for name, n in shapes.items()])
    finally:
        await admin.close()


async def _next_records(consumer: AIOKafkaConsumer, *, within_s: float) -> None:
    """Wait for the consumer's next records; a probe record that never comes is an error."""
    deadline = time.monotonic() + within_s
    while not await consumer.getmany(timeout_ms=500):
        if time.monotonic() > deadline:
            raise RuntimeError(f"the probe record did not reach the consumer within {within_s} s")


async def arrival_latency(
    bootstrap: str, *, wait_ms: int = 500, offsets_ms: tuple[int, ...] = OFFSETS_MS
) -> dict[str, Any]:
    """Produce-to-consumer ms of a single record produced `offset` ms after a waiting
    fetch was sent, per topic shape and offset."""
    await _topics(bootstrap, _SHAPES)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=0)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, fetch_max_wait_ms=wait_ms, enable_auto_commit=False
    )
    await producer.start()
    await consumer.start()
    try:
        tps = [TopicPartition(t, p) for t, n in _SHAPES.items() for p in range(n)]
        consumer.assign(tps)
        await consumer.seek_to_end(*tps)
        await consumer.getmany(timeout_ms=1000)
        found: dict[str, dict[int, float]] = {}
        with _FetchWatch() as fetches:
            for topic, partitions in _SHAPES.items():
                found[topic] = {}
                for i, offset in enumerate(offsets_ms):
                    await asyncio.sleep(wait_ms / 1000 / 4)  # the consumer is quiet
                    fetches.started.clear()
                    await fetches.started.wait()  # a fetch was just sent, and waits
                    await asyncio.sleep(max(offset / 1000 - (time.monotonic() - fetches.at), 0))
                    started = time.monotonic()
                    await producer.send_and_wait(topic, b"x", partition=i % partitions)
                    await _next_records(consumer, within_s=10.0)
                    found[topic][offset] = round((time.monotonic() - started) * 1000, 1)
        return {"fetch_wait_ms": wait_ms, "record_to_consumer_ms_by_offset_ms": found}
    finally:
        await consumer.stop()
        await producer.stop()


async def stream_fetches(
    bootstrap: str, *, min_bytes: int, wait_ms: int = 20, seconds: float = 5.0
) -> dict[str, Any]:
    """Fetches and records a second for a stream of one 100-byte record every 2 ms."""
    topic = f"stream.min{min_bytes}.wait{wait_ms}"
    await _topics(bootstrap, {topic: 1})
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=0)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        fetch_max_wait_ms=wait_ms,
        fetch_min_bytes=min_bytes,
        enable_auto_commit=False,
    )
    await producer.start()
    await consumer.start()
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    await consumer.seek_to_end(tp)
    got = 0
    stop = time.monotonic() + seconds

    async def produce() -> None:
        while time.monotonic() < stop:
            await producer.send_and_wait(topic, b"x" * 100)
            await asyncio.sleep(0.002)

    async def consume() -> None:
        nonlocal got
        while time.monotonic() < stop:
            batches = await consumer.getmany(timeout_ms=100)
            got += sum(len(records) for records in batches.values())

    try:
        with _FetchWatch() as fetches:
            await asyncio.gather(produce(), consume())
        return {
            "fetch_min_bytes": min_bytes,
            "fetch_wait_ms": wait_ms,
            "fetches_per_s": round(fetches.n / seconds, 1),
            "records_per_s": round(got / seconds, 1),
        }
    finally:
        await consumer.stop()
        await producer.stop()


async def probe() -> dict[str, Any]:
    broker = EmbeddedBroker(port=0)
    bootstrap = broker.start()
    try:
        arrival = await arrival_latency(bootstrap)
        print(f"record into a waiting 500 ms fetch, ms to the consumer: {arrival}", flush=True)
        streams = []
        for min_bytes in (1, 10_000):
            stream = await stream_fetches(bootstrap, min_bytes=min_bytes)
            print(f"steady stream: {stream}", flush=True)
            streams.append(stream)
        return {"benchmark": "tansu_fetch_probe", "arrival": arrival, "streams": streams}
    finally:
        broker.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    report = asyncio.run(probe())
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
