"""Does a reader tailing one partition of the embedded broker see every record written?

Several producers, each with several record batches in flight, write to one partition of
a fresh topic while a consumer reads it from the start; afterwards the whole partition is
read again and compared with what the tailing reader saw. On Tansu 0.6 the tailing reader
misses whole batches that are in the log (offsets present, none repeated): a batch becomes
readable after a later one was already returned, behind the reader's position. Apache
Kafka appends in offset order, so a reader there cannot pass a record that is not readable
yet. This is how `inferbus bench scale-step` lost 1-3 answers of 23 250 while every worker
had written them. inferbus's readers read through `infra/gaps.py`, which holds back what
follows a gap in the offsets and reads again from it (tests/integration/test_gaps.py).

    python scripts/probe_tail_reader.py [producers] [records each] [batch] [in flight]
    python scripts/probe_tail_reader.py 8 300 2 4    # here: missed 2-8 of 9 600 in 4 of 6 tries
    python scripts/probe_tail_reader.py 6 500 3 1    # one batch in flight: none missed
"""

from __future__ import annotations

import asyncio
import sys
import time
import uuid
from typing import Any

from aiokafka import TopicPartition

from infra.broker import EmbeddedBroker
from infra.kafka import make_consumer, make_producer
from infra.topics import TopicSpec, ensure_topics


async def _produce(producer: Any, topic: str, name: str, records: int, batch_size: int) -> None:
    for first in range(0, records, batch_size):
        batch = producer.create_batch()
        for n in range(first, min(first + batch_size, records)):
            batch.append(key=None, value=f"{name}-{n}".encode(), timestamp=None)
        await (await producer.send_batch(batch, topic, partition=0))


async def _read_all(bootstrap: str, tp: TopicPartition, quiet_s: float = 5.0) -> dict[bytes, int]:
    consumer = make_consumer(bootstrap=bootstrap, group_id=None, client_id="probe-full")
    await consumer.start()
    consumer.assign([tp])
    await consumer.seek_to_beginning(tp)
    out: dict[bytes, int] = {}
    last = time.monotonic()
    while time.monotonic() - last < quiet_s:
        for records in (await consumer.getmany(timeout_ms=200)).values():
            for record in records:
                out[record.value] = record.offset
                last = time.monotonic()
    await consumer.stop()
    return out


async def probe(producers: int, records: int, batch_size: int, in_flight: int) -> dict[str, Any]:
    """Write, tail, read again; what the tailing reader missed."""
    broker = EmbeddedBroker(port=0)
    bootstrap = await asyncio.to_thread(broker.start)
    try:
        topic = f"probe-{uuid.uuid4().hex[:8]}"
        await ensure_topics(bootstrap, [TopicSpec(topic, 1)])
        tp = TopicPartition(topic, 0)
        tail = make_consumer(bootstrap=bootstrap, group_id=None, client_id="probe-tail")
        await tail.start()
        tail.assign([tp])
        await tail.seek_to_beginning(tp)
        seen: set[bytes] = set()
        done = asyncio.Event()

        async def follow() -> None:
            while not done.is_set():
                for batch in (await tail.getmany(timeout_ms=50)).values():
                    seen.update(record.value for record in batch)

        reader = asyncio.create_task(follow())
        writers = [make_producer(bootstrap, client_id=f"probe-{i}") for i in range(producers)]
        for writer in writers:
            await writer.start()
        await asyncio.gather(
            *(
                _produce(writer, topic, f"{i}.{j}", records, batch_size)
                for i, writer in enumerate(writers)
                for j in range(in_flight)
            )
        )
        await asyncio.sleep(2)
        done.set()
        await reader
        await tail.stop()
        for writer in writers:
            await writer.stop()
        everything = await _read_all(bootstrap, tp)
    finally:
        await asyncio.to_thread(broker.stop)
    missed = sorted(
        (offset, value.decode()) for value, offset in everything.items() if value not in seen
    )
    return {
        "written": producers * in_flight * records,
        "in_log": len(everything),
        "repeated_offsets": len(everything) - len(set(everything.values())),
        "tail_saw": len(seen),
        "missed": missed,
    }


def main() -> None:
    args = [int(a) for a in sys.argv[1:]] + [8, 300, 2, 4][len(sys.argv) - 1 :]
    out = asyncio.run(probe(*args[:4]))
    print(
        f"written {out['written']}, in the log {out['in_log']} (offsets repeated "
        f"{out['repeated_offsets']}), the tailing reader saw {out['tail_saw']}, missed "
        f"{len(out['missed'])}: {out['missed'][:10]}"
    )


if __name__ == "__main__":
    main()
