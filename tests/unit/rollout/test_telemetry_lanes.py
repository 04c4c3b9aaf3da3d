"""A canary group's load and latencies are its own: heartbeats fold by lane."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np

from scaler.collector.latency import WindowLatencies
from scaler.collector.load import heartbeat_group
from scaler.telemetry import TelemetryReader
from schemas.telemetry import Heartbeat, WorkerLoad
from tracing.histogram import LatencyHistogram


def beat(lane: str | None, queue_ms: float) -> Heartbeat:
    hist = LatencyHistogram()
    hist.record_many(np.full(50, queue_ms))
    return Heartbeat(
        instance_id=f"w-{lane}",
        service="inferbus-worker",
        model="m",
        tiers=["interactive"],
        lane=lane,  # type: ignore[arg-type]
        at=datetime.fromtimestamp(999, UTC),
        interval_s=2.0,
        load=WorkerLoad(busy_fraction=0.5),
        histograms=[{"model": "m", "tier": "interactive", "stage": "queue"} | hist.to_dict()],
    )


def test_heartbeats_count_for_their_lanes_group() -> None:
    assert heartbeat_group(beat("canary", 1)) == "inferbus.workers.m.canary.interactive"
    assert heartbeat_group(beat("stable", 1)) == "inferbus.workers.m.interactive"
    assert heartbeat_group(beat(None, 1)) == "inferbus.workers.m.interactive"


def test_lane_latencies_are_apart() -> None:
    reader = TelemetryReader(window_s=60, slot_s=5, clock=lambda: 1000.0)
    reader.apply(beat("stable", 10.0))
    reader.apply(beat("canary", 400.0))
    latencies = WindowLatencies(reader.windows, reader.lanes)
    stable = latencies.p99s("m", "interactive").queue_ms
    canary = latencies.p99s("m", "interactive", "canary").queue_ms
    assert stable is not None and canary is not None
    assert abs(stable - 10.0) < 0.5 and abs(canary - 400.0) < 8
