"""TelemetryPublisher with a fake send, and the scaler's reader with a fake clock."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from scaler.telemetry import StageWindows, TelemetryReader, consume_telemetry
from schemas.telemetry import Heartbeat, WorkerLoad
from schemas.topics import TELEMETRY
from tracing.breakdown import StageBreakdown
from tracing.histogram import LatencyHistogram
from tracing.telemetry import TelemetryPublisher

AT = datetime(2025, 1, 1, tzinfo=UTC)


class FakeSend:
    def __init__(self, fail: int = 0) -> None:
        self.sent: list[tuple[str, bytes, bytes]] = []
        self.fail = fail
        self.event = asyncio.Event()

    async def __call__(self, topic: str, key: bytes, value: bytes) -> None:
        if self.fail:
            self.fail -= 1
            raise ConnectionError("broker down")
        self.sent.append((topic, key, value))
        self.event.set()


async def test_publisher_sends_heartbeats_and_flushes_on_stop() -> None:
    send, breakdown = FakeSend(), StageBreakdown()
    load = WorkerLoad(busy_fraction=0.5, batches=3)
    publisher = TelemetryPublisher(
        send,
        instance_id="w-1",
        service="inferbus-worker",
        model="demo-mlp",
        tiers=("interactive",),
        interval_s=0.01,
        load_provider=lambda: load,
        breakdown=breakdown,
        clock=lambda: AT,
    )
    breakdown.record_stage("demo-mlp", "interactive", "infer", 4.0)
    publisher.start()
    publisher.start()
    await asyncio.wait_for(send.event.wait(), timeout=2)
    breakdown.record_stage("demo-mlp", "interactive", "infer", 6.0)
    await publisher.stop()
    await publisher.stop()
    assert not publisher.running
    beats = [Heartbeat.model_validate_json(v) for _, _, v in send.sent]
    assert {(t, k) for t, k, _ in send.sent} == {(TELEMETRY, b"w-1")}
    assert beats[0].load == load and beats[0].at == AT and beats[0].tiers == ["interactive"]
    assert sum(h["count"] for b in beats for h in b.histograms) == 2


async def test_failed_send_keeps_the_samples() -> None:
    send, breakdown = FakeSend(fail=1), StageBreakdown()
    publisher = TelemetryPublisher(send, instance_id="i", service="s", breakdown=breakdown)
    breakdown.record_stage("m", "batch", "queue", 3.0)
    assert await publisher.publish_now() is False
    assert await publisher.publish_now() is True
    beat = Heartbeat.model_validate_json(send.sent[0][2])
    assert [h["count"] for h in beat.histograms] == [1]


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def heartbeat(instance: str, at_s: float, values: list[float], stage: str = "queue") -> Heartbeat:
    hist = LatencyHistogram()
    for v in values:
        hist.record(v)
    return Heartbeat(
        instance_id=instance,
        service="inferbus-worker",
        at=datetime.fromtimestamp(at_s, UTC),
        interval_s=5,
        load=WorkerLoad(busy_fraction=0.1),
        histograms=[{"model": "m", "tier": "batch", "stage": stage, **hist.to_dict()}],
    )


def test_reader_merges_instances_and_slides_the_window() -> None:
    clock = Clock(1000.0)
    reader = TelemetryReader(window_s=60, slot_s=5, clock=clock)
    reader.apply(heartbeat("a", 990, [10.0] * 90))
    reader.apply(heartbeat("b", 995, [100.0] * 10))
    stats = reader.windows.stats("m", "batch", "queue")
    assert stats is not None and stats.count == 100
    assert stats.p50_ms == pytest.approx(10.0, rel=0.01)
    assert stats.p99_ms == pytest.approx(100.0, rel=0.01)
    assert set(reader.loads()) == {"a", "b"}

    clock.now = 1056.0  # a's 5 s slot [990, 995) has left the 60 s window, b's has not
    stats = reader.windows.stats("m", "batch", "queue")
    assert stats is not None and stats.count == 10
    clock.now = 1100.0
    assert reader.windows.snapshot() == {}
    assert reader.loads() == {}


@pytest.mark.parametrize(
    ("at_s", "counted"),
    [
        pytest.param(900.0, False, id="older-than-window"),
        pytest.param(1030.0, True, id="future-clock-counts-as-now"),
    ],
)
def test_reader_heartbeat_times(at_s: float, counted: bool) -> None:
    windows = StageWindows(window_s=60, slot_s=5, clock=Clock(1000.0))
    hist = LatencyHistogram()
    hist.record(1.0)
    windows.add(("m", "batch", "queue"), at_s, hist)
    assert (windows.stats("m", "batch", "queue") is not None) is counted


def test_reader_counts_bad_input() -> None:
    reader = TelemetryReader()
    assert reader.apply_bytes(b"{not json") is False
    bad = heartbeat("a", 1.0, [1.0]).model_copy(update={"histograms": [{"model": "m"}]})
    reader.apply(bad)
    assert reader.invalid == 2


class FakeRecord:
    def __init__(self, value: bytes | None) -> None:
        self.value = value


class FakeConsumer:
    def __init__(self, values: list[bytes | None], stop: asyncio.Event) -> None:
        self.values, self.stop = values, stop

    async def getmany(self, timeout_ms: int) -> dict[str, list[FakeRecord]]:
        values, self.values = self.values, []
        if not values:
            self.stop.set()
        return {"tp": [FakeRecord(v) for v in values]}


async def test_consume_loop_feeds_the_reader() -> None:
    stop, clock = asyncio.Event(), Clock(1000.0)
    reader = TelemetryReader(clock=clock)
    values = [heartbeat("a", 999, [5.0]).model_dump_json().encode(), None]
    await asyncio.wait_for(consume_telemetry(FakeConsumer(values, stop), reader, stop=stop), 2)
    stats = reader.windows.stats("m", "batch", "queue")
    assert stats is not None and stats.count == 1


def test_instances_that_stop_sending_do_not_pile_up() -> None:
    """Replaced workers send no more heartbeats; `loads()` may never be called between."""
    clock = Clock(0.0)
    reader = TelemetryReader(window_s=60, slot_s=5, clock=clock)
    for i in range(2000):  # a new instance every second, each heard from once
        clock.now = float(i)
        reader.apply(heartbeat(f"w{i}", float(i), [1.0]))
    assert len(reader._loads) <= 2 * 61 + 1
    assert set(reader.loads()) == {f"w{i}" for i in range(1939, 2000)}  # the last 60 s
