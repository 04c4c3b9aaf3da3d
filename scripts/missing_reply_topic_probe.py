"""Times results produced next to one whose reply topic does not exist (D1, stop 31).

    inferbus up --port 19092 &          # wait for "inferbus ready"
    .venv/bin/python scripts/missing_reply_topic_probe.py 127.0.0.1:19092 10 out.json

Each try produces one demo-mlp request whose `reply_to` names a topic nobody created,
then five valid ones, and times the five on `inferbus.results`. Before `69406b5`, 2 of 8
tries took ~30 s (the publisher's lookup of the missing topic set off a metadata storm in
the producer's client, and the results already handed to it were refused until its
request timeout); after it, 0 of 10. Writes one JSON report.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
import uuid
from pathlib import Path

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

SLOW_S = 5.0


def request(request_id: str, reply_to: str) -> bytes:
    return json.dumps(
        {
            "request_id": request_id,
            "model": "demo-mlp",
            "tier": "interactive",
            "inputs": {"x": {"dtype": "float32", "shape": [1, 16], "data": [[0.1] * 16]}},
            "reply_to": reply_to,
            "timeout_ms": 60000,
        }
    ).encode()


async def one_try(producer: AIOKafkaProducer, results: AIOKafkaConsumer) -> float:
    """Seconds until the five valid results were all read (45 s at most)."""
    missing = f"inferbus.results.nope-{uuid.uuid4().hex[:8]}"
    await producer.send_and_wait("inferbus.ingest", request(uuid.uuid4().hex, missing))
    started = time.perf_counter()
    waiting = {uuid.uuid4().hex for _ in range(5)}
    for request_id in waiting:
        await producer.send("inferbus.ingest", request(request_id, "inferbus.results"))
    await producer.flush()
    while waiting and time.perf_counter() - started < 45:
        for records in (await results.getmany(timeout_ms=500)).values():
            for record in records:
                waiting.discard(json.loads(record.value or b"{}").get("request_id"))
    return time.perf_counter() - started


async def run(bootstrap: str, tries: int) -> list[float]:
    """Each try's seconds until its five valid results were read."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    results = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await producer.start()
    await results.start()
    try:
        await results.topics()  # metadata of every topic, inferbus.results's partitions too
        tps = [
            TopicPartition("inferbus.results", p)
            for p in results.partitions_for_topic("inferbus.results") or ()
        ]
        results.assign(tps)
        await results.seek_to_end(*tps)
        seconds = []
        for i in range(tries):
            seconds.append(round(await one_try(producer, results), 2))
            print(f"try {i + 1}/{tries}: the five valid results in {seconds[-1]:.2f} s", flush=True)
            await asyncio.sleep(2)
    finally:
        await producer.stop()
        await results.stop()
    return seconds


def main(bootstrap: str, tries: int, out: Path) -> None:
    seconds = asyncio.run(run(bootstrap, tries))
    slow = sum(s > SLOW_S for s in seconds)
    out.write_text(json.dumps({"tries": tries, "seconds": seconds, "slow_over_5s": slow}, indent=1))
    print(f"{slow} of {tries} tries over {SLOW_S:g} s; wrote {out}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), Path(sys.argv[3]))
