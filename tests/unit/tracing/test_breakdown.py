"""StageBreakdown: folding stage spans and recorded stages into per-key histograms."""

from __future__ import annotations

import threading

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tracing.attributes import RequestAttrs
from tracing.breakdown import StageBreakdown, default_breakdown, record_stage
from tracing.histogram import LatencyHistogram
from tracing.kafka import infer_span, stage_span, timed_span

REQ = RequestAttrs(model="demo-mlp", tier="batch", request_id="r")


def test_stage_spans_fold_per_model_tier_stage(spans: InMemorySpanExporter) -> None:
    timed_span("queue", start_ns=0, end_ns=7_000_000, stage="queue", request=REQ)
    timed_span("queue", start_ns=0, end_ns=9_000_000, stage="queue", request=REQ)
    timed_span("other", start_ns=0, end_ns=1_000_000, request=REQ)  # not a stage
    timed_span("queue", start_ns=0, end_ns=1_000_000, stage="queue")  # no model/tier
    with pytest.raises(RuntimeError), stage_span("ingest", stage="ingest", request=REQ):
        raise RuntimeError  # errored spans stay out
    with infer_span([timed_span("p", start_ns=0, end_ns=1)], request=REQ) as batch:
        batch.timed_step("run", start_ns=0, end_ns=20_000_000)
    entries = {e["stage"]: e for e in default_breakdown().snapshot_and_reset()}
    assert set(entries) == {"queue", "infer"}
    queue = LatencyHistogram.from_dict(entries["queue"])
    assert queue.count == 2
    assert queue.sum == pytest.approx(16.0)
    assert entries["queue"]["model"] == "demo-mlp" and entries["queue"]["tier"] == "batch"
    # The batch's engine time counts once per request it served.
    assert entries["infer"]["count"] == 1
    assert default_breakdown().snapshot_and_reset() == []


def test_record_stage_and_observers() -> None:
    seen: list[tuple[str, str, str, float, int]] = []
    breakdown = StageBreakdown(observers=[lambda *a: seen.append(a)])
    breakdown.record_stage("m", "critical", "e2e", 120.0, count=3)
    assert seen == [("m", "critical", "e2e", 120.0, 3)]
    (entry,) = breakdown.snapshot_and_reset()
    assert entry["count"] == 3
    with pytest.raises(ValueError, match="unknown stage"):
        breakdown.record_stage("m", "critical", "compile", 1.0)


def test_module_record_stage_goes_to_the_process_breakdown() -> None:
    default_breakdown().snapshot_and_reset()
    record_stage("m", "batch", "e2e", 5.0)
    assert [e["stage"] for e in default_breakdown().snapshot_and_reset()] == ["e2e"]


def test_restore_merges_a_snapshot_back() -> None:
    breakdown = StageBreakdown()
    breakdown.record_stage("m", "batch", "queue", 1.0)
    snapshot = breakdown.snapshot_and_reset()
    breakdown.record_stage("m", "batch", "queue", 2.0)
    breakdown.restore(snapshot)
    (entry,) = breakdown.snapshot_and_reset()
    assert entry["count"] == 2


def test_concurrent_recording_loses_nothing() -> None:
    breakdown = StageBreakdown()

    def work() -> None:
        for i in range(2000):
            breakdown.record_stage("m", "batch", "infer", float(i % 50 + 1))

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    (entry,) = breakdown.snapshot_and_reset()
    assert entry["count"] == 16000
