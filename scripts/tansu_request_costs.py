"""What each kind of Kafka request costs the embedded Tansu broker in CPU.

    .venv/bin/python scripts/tansu_request_costs.py [--json OUT]

One bare aiokafka client against a fresh embedded broker (infra.broker) sends each kind of
request one at a time, hundreds of times, and the broker's own CPU counters
(/proc/<pid>/stat) are read around each series: produce (one record; a 32-record batch),
offset commit, committed-offset fetch, a produce followed by the fetch that reads it, and
fetches that wait on an empty topic. Prints one line per kind and writes them as JSON.
Absolute figures move with the machine's speed; compare kinds within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.structs import OffsetAndMetadata

from infra.broker import EmbeddedBroker
from infra.tasks import within

_TICKS = os.sysconf("SC_CLK_TCK")
_PAYLOAD = b"x" * 300
"""About one small request event."""


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


class _Meter:
    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.report: dict[str, dict[str, float]] = {}

    async def series(self, name: str, step: Callable[[int], Awaitable[Any]], n: int) -> None:
        """Run `step` n times, one after another; record the broker's CPU a request."""
        cpu0, t0 = _cpu_s(self.pid), time.monotonic()
        for i in range(n):
            await step(i)
        cpu1, t1 = _cpu_s(self.pid), time.monotonic()
        self.report[name] = {
            "requests": n,
            "broker_cpu_ms_per_request": round(1000 * (cpu1 - cpu0) / n, 4),
            "wall_ms_per_request": round(1000 * (t1 - t0) / n, 3),
        }
        print(f"{name}: {self.report[name]}", flush=True)


async def _empty_fetches(meter: _Meter, boot: str, topic: str, partitions: int) -> None:
    """Fetches with a 5 ms wait on an empty topic for 5 s, counted as they are sent."""
    from aiokafka import conn

    sent = {"fetches": 0}
    original = conn.AIOKafkaConnection.send

    def counting(connection: Any, request: Any, *args: Any, **kw: Any) -> Any:
        if type(request).__name__.startswith("Fetch"):
            sent["fetches"] += 1
        return original(connection, request, *args, **kw)

    consumer = AIOKafkaConsumer(bootstrap_servers=boot, fetch_max_wait_ms=5)
    await consumer.start()
    consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
    await consumer.seek_to_end()
    await asyncio.sleep(1.0)
    conn.AIOKafkaConnection.send = counting
    try:
        cpu0 = _cpu_s(meter.pid)
        with contextlib.suppress(TimeoutError):  # nothing comes: only the waiting counts
            await within(consumer.getone(), 5.0)
        cpu1 = _cpu_s(meter.pid)
    finally:
        conn.AIOKafkaConnection.send = original
        await consumer.stop()
    n = max(sent["fetches"], 1)
    name = f"empty fetch, 5 ms wait, {partitions} partition(s)"
    meter.report[name] = {
        "requests": n,
        "broker_cpu_ms_per_request": round(1000 * (cpu1 - cpu0) / n, 4),
        "fetches_per_s": n / 5.0,
    }
    print(f"{name}: {meter.report[name]}", flush=True)


async def measure() -> dict[str, dict[str, float]]:
    broker = EmbeddedBroker(port=0)
    boot = broker.start()
    pid = broker.pid
    assert pid is not None
    meter = _Meter(pid)
    admin = AIOKafkaAdminClient(bootstrap_servers=boot)
    await admin.start()
    await admin.create_topics([NewTopic("p.twelve", 12, 1), NewTopic("p.one", 1, 1)])
    await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers=boot, acks="all", linger_ms=0)
    await producer.start()
    one, twelve = TopicPartition("p.one", 0), [TopicPartition("p.twelve", p) for p in range(12)]
    try:
        await meter.series(
            "produce 1 record",
            lambda i: producer.send_and_wait("p.one", _PAYLOAD, partition=0),
            1500,
        )

        async def batch_of_32(_: int) -> None:
            batch = producer.create_batch()
            for _ in range(32):
                batch.append(key=None, value=_PAYLOAD, timestamp=None)
            batch.close()
            await (await producer.send_batch(batch, "p.one", partition=0))

        await meter.series("produce a 32-record batch", batch_of_32, 500)
        group = AIOKafkaConsumer(bootstrap_servers=boot, group_id="costs", enable_auto_commit=False)
        await group.start()
        group.assign([one, *twelve])
        await meter.series(
            "offset commit, 1 partition",
            lambda i: group.commit({one: OffsetAndMetadata(i + 1, "")}),
            1500,
        )
        await meter.series(
            "offset commit, 12 partitions",
            lambda i: group.commit({tp: OffsetAndMetadata(i + 1, "") for tp in twelve}),
            500,
        )
        await meter.series("committed offset, 1 partition", lambda i: group.committed(one), 1500)
        await group.stop()
        reader = AIOKafkaConsumer(bootstrap_servers=boot, fetch_max_wait_ms=500)
        await reader.start()
        reader.assign([one])
        await reader.seek_to_end(one)

        async def produce_then_read(_: int) -> None:
            await producer.send_and_wait("p.one", _PAYLOAD, partition=0)
            await reader.getone()

        await meter.series("produce 1 record + the fetch that reads it", produce_then_read, 1000)
        await reader.stop()
        await _empty_fetches(meter, boot, "p.one", 1)
        await _empty_fetches(meter, boot, "p.twelve", 12)
    finally:
        await producer.stop()
        broker.stop()
    return meter.report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()
    report = asyncio.run(measure())
    if args.json:
        args.json.write_text(json.dumps({"tansu_request_costs": report}, indent=1) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
