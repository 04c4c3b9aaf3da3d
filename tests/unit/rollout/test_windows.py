"""Per-version results and e2e latency over a window, from worker heartbeats."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest

from scaler.rollout.windows import VersionWindows
from schemas.telemetry import Heartbeat, WorkerLoad
from tracing.histogram import LatencyHistogram


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def heartbeat(
    at: float,
    version: str | None,
    results: dict[str, int],
    e2e_ms: list[float] = (),  # type: ignore[assignment]
    *,
    model: str = "m",
    histogram_model: str | None = None,
) -> Heartbeat:
    histograms: list[dict[str, Any]] = []
    if e2e_ms:
        hist = LatencyHistogram()
        hist.record_many(np.asarray(e2e_ms))
        histograms.append(
            {"model": histogram_model or model, "tier": "interactive", "stage": "e2e"}
            | hist.to_dict()
        )
        infer = LatencyHistogram()
        infer.record_many(np.asarray([1.0]))
        histograms.append(
            {"model": model, "tier": "interactive", "stage": "infer"} | infer.to_dict()
        )
    return Heartbeat(
        instance_id=f"w-{version}",
        service="inferbus-worker",
        model=model,
        tiers=["interactive"],
        lane="stable",
        model_version=version,
        at=datetime.fromtimestamp(at, UTC),
        interval_s=2.0,
        load=WorkerLoad(busy_fraction=0.5, results=results),
        histograms=histograms,
    )


def test_results_and_p99_per_version() -> None:
    clock = Clock(1000.0)
    windows = VersionWindows(retain_s=600, slot_s=5, clock=clock)
    windows.apply(heartbeat(990, "1", {"ok": 90, "internal_error": 2}, [10.0] * 90))
    windows.apply(heartbeat(995, "1", {"ok": 10, "invalid_input": 3}, [10.0] * 10))
    windows.apply(heartbeat(995, "2", {"ok": 5, "internal_error": 5}, [100.0] * 5))

    stable = windows.stats("m", "1", 60)
    canary = windows.stats("m", "2", 60)
    assert (stable.requests, stable.errors) == (105, 2)
    assert stable.p99_ms == pytest.approx(10.0, rel=0.02)
    assert (canary.requests, canary.errors, canary.error_rate) == (10, 5, 0.5)
    assert canary.p99_ms == pytest.approx(100.0, rel=0.02)


def test_only_the_window_counts_and_old_slots_expire() -> None:
    clock = Clock(1000.0)
    windows = VersionWindows(retain_s=120, slot_s=5, clock=clock)
    windows.apply(heartbeat(900, "1", {"ok": 50}))
    windows.apply(heartbeat(990, "1", {"ok": 7}))
    assert windows.stats("m", "1", 30).requests == 7
    assert windows.stats("m", "1", 600).requests == 57  # capped at retain_s: both in it
    clock.now = 1100.0
    windows.apply(heartbeat(1100, "1", {"ok": 1}))
    assert windows.stats("m", "1", 600).requests == 8  # the 900 s slot has expired


def test_the_halves_of_a_window_split_its_results() -> None:
    clock = Clock(1000.0)
    windows = VersionWindows(retain_s=600, slot_s=5, clock=clock)
    windows.apply(heartbeat(945, "2", {"ok": 20}, [500.0] * 20))  # older half: a restart
    windows.apply(heartbeat(985, "2", {"ok": 30}, [20.0] * 30))
    whole, older = windows.stats("m", "2", 60), windows.stats("m", "2", 60, ended_s_ago=30)
    newer = windows.stats("m", "2", 30)
    assert (whole.requests, older.requests, newer.requests) == (50, 20, 30)
    assert older.p99_ms == pytest.approx(500.0, rel=0.02)
    assert newer.p99_ms == pytest.approx(20.0, rel=0.02)


@pytest.mark.parametrize(
    "beat",
    [
        pytest.param(heartbeat(999, None, {"ok": 5}), id="no-version"),
        pytest.param(heartbeat(100, "1", {"ok": 5}), id="older-than-retained"),
    ],
)
def test_heartbeats_that_say_nothing_of_a_version_are_ignored(beat: Heartbeat) -> None:
    windows = VersionWindows(retain_s=600, slot_s=5, clock=Clock(1000.0))
    windows.apply(beat)
    assert windows.stats("m", "1", 600).requests == 0


def test_histograms_of_other_models_or_stages_do_not_count() -> None:
    windows = VersionWindows(retain_s=600, slot_s=5, clock=Clock(1000.0))
    windows.apply(heartbeat(999, "1", {"ok": 3}, [50.0] * 3, histogram_model="other"))
    assert windows.stats("m", "1", 60).p99_ms is None


def test_an_unreadable_histogram_is_counted_and_skipped() -> None:
    windows = VersionWindows(retain_s=600, slot_s=5, clock=Clock(1000.0))
    beat = heartbeat(999, "1", {"ok": 3})
    broken = beat.model_copy(
        update={"histograms": [{"model": "m", "tier": "interactive", "stage": "e2e"}]}
    )
    windows.apply(broken)
    assert windows.invalid == 1
    assert windows.stats("m", "1", 60).requests == 3
