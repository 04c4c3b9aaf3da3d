"""LatencyHistogram: accuracy against numpy, merge, JSON round trip, bounded memory."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracing.histogram import LatencyHistogram

ALPHA = 0.01
latencies = st.lists(
    st.floats(min_value=0.01, max_value=1e6, allow_nan=False, allow_infinity=False),
    min_size=1,
    max_size=300,
)
quantiles = st.floats(min_value=0.0, max_value=1.0)


def _close(estimate: float | None, exact: float) -> bool:
    assert estimate is not None
    return abs(estimate - exact) <= ALPHA * exact * (1 + 1e-9)


@settings(max_examples=200, deadline=None)
@given(values=latencies, q=quantiles)
def test_quantile_within_relative_accuracy(values: list[float], q: float) -> None:
    hist = LatencyHistogram(ALPHA)
    for v in values:
        hist.record(v)
    exact = float(np.quantile(np.array(values), q, method="lower"))
    assert _close(hist.quantile(q), exact)


@settings(max_examples=100, deadline=None)
@given(a=latencies, b=latencies, q=quantiles)
def test_merge_equals_recording_everything(a: list[float], b: list[float], q: float) -> None:
    left, right = LatencyHistogram(ALPHA), LatencyHistogram(ALPHA)
    for v in a:
        left.record(v)
    for v in b:
        right.record(v)
    left.merge(right)
    assert left.count == len(a) + len(b)
    assert left.sum == pytest.approx(sum(a) + sum(b))
    assert _close(left.quantile(q), float(np.quantile(np.array(a + b), q, method="lower")))


@settings(max_examples=100, deadline=None)
@given(values=latencies)
def test_dict_round_trip_through_json(values: list[float]) -> None:
    hist = LatencyHistogram(ALPHA)
    for v in values:
        hist.record(v)
    back = LatencyHistogram.from_dict(json.loads(json.dumps(hist.to_dict())))
    assert back.to_dict() == hist.to_dict()
    assert back.quantile(0.99) == hist.quantile(0.99)


def test_weighted_record_counts_as_repeats() -> None:
    weighted, repeated = LatencyHistogram(), LatencyHistogram()
    weighted.record(12.5, count=8)
    for _ in range(8):
        repeated.record(12.5)
    assert weighted.to_dict() == repeated.to_dict()


def test_memory_is_bounded_and_the_tail_survives_collapse() -> None:
    hist = LatencyHistogram(ALPHA, max_bins=64)
    values = np.geomspace(0.01, 1e6, 5000)
    for v in values:
        hist.record(float(v))
    assert hist.bin_count <= 64
    assert _close(hist.quantile(0.99), float(np.quantile(values, 0.99, method="lower")))


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        pytest.param([], 0.5, None, id="empty"),
        pytest.param([0.0, 0.0], 0.5, 0.0, id="zeros"),
        pytest.param([-3.0], 1.0, 0.0, id="negative-clamped"),
        pytest.param([5.0], 0.0, 5.0, id="single-clamped-to-min"),
    ],
)
def test_edge_cases(values: list[float], q: float, expected: float | None) -> None:
    hist = LatencyHistogram()
    for v in values:
        hist.record(v)
    assert hist.quantile(q) == expected


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param({"alpha": 0.01, "count": 2, "i": [1], "n": [1]}, id="count-mismatch"),
        pytest.param({"alpha": 0.01, "count": 1, "i": [1, 2], "n": [1]}, id="ragged"),
        pytest.param({"alpha": 2.0, "count": 0}, id="bad-alpha"),
    ],
)
def test_from_dict_rejects_inconsistent_payloads(payload: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        LatencyHistogram.from_dict(payload)


def test_rejects_non_finite_and_mismatched_merge() -> None:
    with pytest.raises(ValueError):
        LatencyHistogram().record(float("nan"))
    with pytest.raises(ValueError):
        LatencyHistogram(0.01).merge(LatencyHistogram(0.02))


batch_values = st.lists(
    st.one_of(
        st.floats(min_value=-10.0, max_value=1e6),
        st.sampled_from([0.0, 5e-4, 1e-3, -1.0, float("nan"), float("inf"), float("-inf")]),
    ),
    max_size=64,
)


@settings(max_examples=300, deadline=None)
@given(values=batch_values)
def test_record_many_is_record_one_at_a_time(values: list[float]) -> None:
    """A batch's stage times in one call (NaN and infinity skipped, negatives as zero) give
    the same histogram as recording each finite value alone."""
    bulk, single = LatencyHistogram(), LatencyHistogram()
    bulk.record_many(np.array(values, dtype=np.float64))
    for value in values:
        if np.isfinite(value):
            single.record(value)
    bulk_dict, single_dict = bulk.to_dict(), single.to_dict()
    assert bulk_dict.pop("sum") == pytest.approx(single_dict.pop("sum"))
    assert bulk_dict == single_dict
