"""Queue, engine and e2e p99 from per-stage windows: the joint p99s of each request's wait
and engine time where workers record them, else sums of the stages' p99s."""

from __future__ import annotations

import pytest

from scaler.collector.latency import WindowLatencies, stage_p99s
from scaler.telemetry import StageStats, StageWindows
from tracing.histogram import LatencyHistogram


def stats(p99: float) -> StageStats:
    return StageStats(count=10, p50_ms=p99 / 2, p95_ms=p99, p99_ms=p99, mean_ms=p99 / 2, max_ms=p99)


@pytest.mark.parametrize(
    ("by_stage", "queue", "engine", "e2e"),
    [
        pytest.param({}, None, None, None, id="nothing-measured"),
        pytest.param(
            {"queue": 300, "batch_wait": 5, "infer": 40, "preprocess": 2, "e2e": 360},
            305, 42, 360, id="sums-of-stage-p99s",
        ),
        pytest.param({"infer": 800, "e2e": 810}, None, 800, 810, id="engine-only"),
        pytest.param(
            {"queue": 300, "batch_wait": 5, "wait": 240, "infer": 40, "preprocess": 2,
             "engine": 41, "e2e": 360},
            240, 41, 360, id="the-joint-p99s-where-the-workers-record-them",
        ),
        pytest.param(
            {"queue": 300, "batch_wait": 5, "wait": 240, "infer": 40, "e2e": 360},
            240, 40, 360, id="one-joint-the-other-summed",
        ),
    ],
)  # fmt: skip
def test_stage_p99s(
    by_stage: dict[str, float], queue: float | None, engine: float | None, e2e: float | None
) -> None:
    got = stage_p99s(lambda s: stats(by_stage[s]) if s in by_stage else None)
    assert (got.queue_ms, got.engine_ms, got.e2e_ms) == (queue, engine, e2e)


def test_window_latencies_reads_the_windows() -> None:
    windows = StageWindows(window_s=60, slot_s=5, clock=lambda: 1000.0)
    hist = LatencyHistogram()
    for _ in range(100):
        hist.record(50.0)
    windows.add(("m", "interactive", "infer"), 999.0, hist)
    got = WindowLatencies(windows).p99s("m", "interactive")
    assert got.engine_ms == pytest.approx(50.0, rel=0.05)
    assert got.queue_ms is None
