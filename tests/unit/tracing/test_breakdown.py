"""StageBreakdown: folding recorded stage times into per-key histograms."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from tracing.breakdown import StageBreakdown, default_breakdown, record_stage, with_sums
from tracing.histogram import LatencyHistogram


def test_record_many_folds_a_batch_per_model_tier_stage() -> None:
    breakdown = StageBreakdown()
    breakdown.record_many("demo-mlp", "batch", "queue", np.array([7.0, 9.0, np.nan]))
    breakdown.record_many("demo-mlp", "batch", "infer", np.array([20.0]))
    entries = {e["stage"]: e for e in breakdown.snapshot_and_reset()}
    assert set(entries) == {"queue", "infer"}
    queue = LatencyHistogram.from_dict(entries["queue"])
    assert queue.count == 2, "NaN marks a stage the request never reached"
    assert queue.sum == pytest.approx(16.0)
    assert queue.quantile(1.0) == pytest.approx(9.0, rel=0.02)
    assert entries["queue"]["model"] == "demo-mlp" and entries["queue"]["tier"] == "batch"
    assert breakdown.snapshot_and_reset() == []


def test_record_many_matches_one_at_a_time() -> None:
    values = np.random.default_rng(3).lognormal(1.0, 1.5, size=500)
    bulk, single = LatencyHistogram(), LatencyHistogram()
    bulk.record_many(values)
    for value in values:
        single.record(float(value))
    bulk_dict, single_dict = bulk.to_dict(), single.to_dict()
    assert bulk_dict.pop("sum") == pytest.approx(single_dict.pop("sum"))
    assert bulk_dict == single_dict


def test_record_stage_and_observers() -> None:
    seen: list[tuple[str, str, str, list[float]]] = []
    breakdown = StageBreakdown(observers=[lambda m, t, s, v: seen.append((m, t, s, list(v)))])
    breakdown.record_stage("m", "critical", "e2e", 120.0, count=3)
    assert seen == [("m", "critical", "e2e", [120.0, 120.0, 120.0])]
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


NAN = float("nan")


@pytest.mark.parametrize(
    ("stages", "wait", "engine"),
    [
        pytest.param(
            {"queue": [300, 2], "batch_wait": [5, 250], "preprocess": [1, 1],
             "infer": [40, 400], "postprocess": [2, 2]},
            [305, 252], [43, 403], id="per-request-sums",
        ),
        pytest.param(
            {"queue": [10, NAN], "batch_wait": [NAN, NAN]}, [10, NAN], None,
            id="a-part-that-did-not-apply-counts-0-none-applied-is-nan",
        ),
        pytest.param({"queue": [10], "infer": [3]}, None, None, id="parts-missing-no-sum"),
    ],
)  # fmt: skip
def test_with_sums_adds_each_request_s_wait_and_engine(
    stages: dict[str, list[float]], wait: list[float] | None, engine: list[float] | None
) -> None:
    out = with_sums(stages)
    for name, expected in (("wait", wait), ("engine", engine)):
        if expected is None:
            assert name not in out
        else:
            np.testing.assert_array_equal(out[name], expected)
    assert set(stages) <= set(out)


def test_a_summed_stage_is_recorded_like_a_stage() -> None:
    breakdown = StageBreakdown()
    breakdown.record_many("m", "interactive", "wait", np.array([1.0]))
    with pytest.raises(ValueError, match="unknown stage 'waiting'"):
        breakdown.record_many("m", "interactive", "waiting", np.array([1.0]))
