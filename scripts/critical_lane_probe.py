"""What a critical request waits at ingest while interactive traffic comes in a rhythm.

    .venv/bin/python scripts/critical_lane_probe.py [--seconds 20] [--json OUT]

A closed-loop producer's requests reach ingest in bursts, and ingest's interactive lane
may park a fetch until just past the next burst (`INFERBUS_KAFKA_FETCH_RHYTHM_TOLERANCE`,
docs/kafka.md). A critical request sent between bursts must not wait for that fetch. On
the embedded broker, with one in-process ingest and the demo models, the probe sends a
burst of 32 interactive requests every 150 ms and, meanwhile, one critical request at a
random moment of every other gap, for each of four arms:

- the rhythm on or off (tolerance 0.3 or 0), and
- the critical request on its own topic (`inferbus.ingest.critical`, ingest's critical
  consumer) or on the shared `inferbus.ingest` (read with the interactive lane: where
  critical requests were read before stop 37).

A watcher with a fixed 5 ms fetch wait reads the routed request topics; a request's hop is
the time from its producer's ack to the watcher having it (requests in JSON: ingest routes
the producer's bytes unchanged) (the watcher's own wait adds at
most ~2.5 ms). Prints a line per arm and writes the figures as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson
from aiokafka import AIOKafkaConsumer, TopicPartition

from infra.broker import EmbeddedBroker
from infra.kafka import make_producer
from infra.settings import kafka_settings
from infra.topics import ensure_topics, standard_topics
from schemas.topics import INGEST, ingest_topic, request_topic
from services.client import InferenceClient
from services.ingest.app import IngestService
from services.ingest.settings import IngestSettings
from services.models.demo import write_demo_models

MODEL = "demo-mlp"
BURST = 32
PERIOD_S = 0.150
ARMS = (
    ("rhythm-on", 0.3, "own"),
    ("rhythm-on", 0.3, "shared"),
    ("rhythm-off", 0.0, "own"),
    ("rhythm-off", 0.0, "shared"),
)


def _percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    ordered = sorted(values)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 1)

    return {
        "n": len(ordered),
        "p50_ms": at(0.5),
        "p90_ms": at(0.9),
        "p99_ms": at(0.99),
        "max_ms": round(ordered[-1] * 1000, 1),
        "mean_ms": round(statistics.fmean(ordered) * 1000, 1),
    }


async def _watch(
    bootstrap: str, arrivals: dict[str, float], stop: asyncio.Event, ready: asyncio.Event
) -> None:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, fetch_max_wait_ms=5, enable_auto_commit=False
    )
    await consumer.start()
    try:
        topics = [request_topic(MODEL, "critical"), request_topic(MODEL, "interactive")]
        partitions = [
            TopicPartition(t, p) for t in topics for p in consumer.partitions_for_topic(t) or ()
        ]
        consumer.assign(partitions)
        await consumer.seek_to_end(*partitions)
        ready.set()
        while not stop.is_set():
            batches = await consumer.getmany(timeout_ms=100)
            now = time.monotonic()
            for records in batches.values():
                for record in records:
                    request_id = str(orjson.loads(record.value or b"{}").get("request_id"))
                    arrivals.setdefault(request_id, now)
    finally:
        await consumer.stop()


async def _arm(
    bootstrap: str, models: Path, tolerance: float, critical_on: str, *, seconds: float, tag: str
) -> dict[str, Any]:
    os.environ["INFERBUS_KAFKA_FETCH_RHYTHM_TOLERANCE"] = str(tolerance)
    kafka_settings.cache_clear()
    ingest = IngestService(bootstrap, IngestSettings(models_dir=models))
    await ingest.start()
    builder = InferenceClient(bootstrap)
    producer = make_producer(bootstrap)
    await producer.start()
    arrivals: dict[str, float] = {}
    stop, ready = asyncio.Event(), asyncio.Event()
    watcher = asyncio.create_task(_watch(bootstrap, arrivals, stop, ready))
    await ready.wait()
    inputs = {"x": np.ones((1, 16), np.float32)}
    sent: dict[str, tuple[str, float]] = {}
    rng = random.Random(7)

    async def send(tier: Any, topic: str, request_id: str) -> None:
        wire = builder.build_request(MODEL, inputs, tier=tier, request_id=request_id, form="json")
        value, content_type = wire.encode()
        await producer.send_and_wait(
            topic, value, key=request_id.encode(), headers=[("content-type", content_type)]
        )
        sent[request_id] = (tier, time.monotonic())

    async def critical_between(gap: int) -> None:
        await asyncio.sleep(rng.uniform(0.01, PERIOD_S - 0.01))
        topic = ingest_topic("critical") if critical_on == "own" else INGEST
        await send("critical", topic, f"c-{tag}-{gap}")

    try:
        started = time.monotonic()
        gap = 0
        side: list[asyncio.Task[None]] = []
        while time.monotonic() - started < seconds:
            burst_at = time.monotonic()
            await asyncio.gather(
                *(
                    send("interactive", ingest_topic("interactive"), f"i-{tag}-{gap}-{k}")
                    for k in range(BURST)
                )
            )
            if gap % 2 == 1 and time.monotonic() - started > 3.0:  # after the rhythm is learned
                side.append(asyncio.create_task(critical_between(gap)))
            gap += 1
            await asyncio.sleep(max(0.0, PERIOD_S - (time.monotonic() - burst_at)))
        await asyncio.gather(*side)
        await asyncio.sleep(1.0)
    finally:
        stop.set()
        await watcher
        await producer.stop()
        await ingest.stop()
    return {
        "rhythm_tolerance": tolerance,
        "critical_topic": ingest_topic("critical") if critical_on == "own" else INGEST,
        **_hops(sent, arrivals),
    }


def _hops(sent: dict[str, tuple[str, float]], arrivals: dict[str, float]) -> dict[str, Any]:
    """Each tier's hop figures, the requests never routed, and those over 100 ms."""
    hops: dict[str, list[float]] = {"critical": [], "interactive": []}
    missing = 0
    late: list[tuple[str, float]] = []
    for request_id, (tier, at) in sent.items():
        if request_id not in arrivals:
            missing += 1
            continue
        if request_id.startswith("i-") and int(request_id.split("-")[2]) * PERIOD_S < 3.0:
            continue  # the rhythm is still being learned
        hops[tier].append(arrivals[request_id] - at)
        if arrivals[request_id] - at > 0.1:
            late.append((request_id, round((arrivals[request_id] - at) * 1000, 1)))
    return {
        "critical_hop": _percentiles(hops["critical"]),
        "interactive_hop": _percentiles(hops["interactive"]),
        "not_routed": missing,
        "over_100_ms": sorted(late)[:200],
    }


async def main(seconds: float, *, reverse: bool) -> dict[str, Any]:
    report: dict[str, Any] = {
        "probe": "critical_lane",
        "burst": BURST,
        "period_ms": PERIOD_S * 1000,
        "seconds_per_arm": seconds,
        "arms": [],
    }
    with tempfile.TemporaryDirectory() as tmp, EmbeddedBroker(port=0) as broker:
        models = Path(tmp) / "models"
        write_demo_models(models)
        # No worker reads the routed requests: lift the queue bounds so ingest routes them
        # all instead of answering `rejected_overload` once the backlog reaches them.
        spec = models / MODEL / "model.yaml"
        spec.write_text(re.sub(r"max_queue: \d+", "max_queue: 100000000", spec.read_text()))
        await ensure_topics(broker.bootstrap, standard_topics([MODEL, "demo-encoder"]))
        for tag, (name, tolerance, critical_on) in enumerate(ARMS[::-1] if reverse else ARMS):
            arm = await _arm(
                broker.bootstrap, models, tolerance, critical_on, seconds=seconds, tag=str(tag)
            )
            arm["arm"] = f"{name}, critical on {arm['critical_topic']}"
            report["arms"].append(arm)
            c, i = arm["critical_hop"], arm["interactive_hop"]
            print(
                f"{arm['arm']}: critical hop p50 {c.get('p50_ms')} p99 {c.get('p99_ms')} "
                f"max {c.get('max_ms')} ms (n={c.get('n')}); interactive p50 "
                f"{i.get('p50_ms')} p99 {i.get('p99_ms')} ms; not routed {arm['not_routed']}",
                flush=True,
            )
    return report


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="traffic per arm")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    parser.add_argument("--reverse", action="store_true", help="run the arms in reverse order")
    args = parser.parse_args()
    figures = asyncio.run(main(args.seconds, reverse=args.reverse))
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=1))
        print(f"wrote {args.json}")
