"""Arrival and service rates from offset deltas, and the age of the oldest request."""

from __future__ import annotations

import pytest

from scaler.collector.rates import OffsetSample, oldest_age_s, rates, window


def s(at: float, ends: dict[int, int], positions: dict[int, int]) -> OffsetSample:
    return OffsetSample(at, ends, positions)


@pytest.mark.parametrize(
    ("samples", "arrival", "service", "resets"),
    [
        pytest.param([s(0, {0: 0}, {0: 0})], None, None, 0, id="one-sample-no-rate"),
        pytest.param(
            [s(0, {0: 0, 1: 0}, {0: 0, 1: 0}), s(10, {0: 100, 1: 50}, {0: 80, 1: 20})],
            15.0,
            10.0,
            0,
            id="two-partitions",
        ),
        pytest.param(
            [s(0, {0: 0}, {0: 0}), s(5, {0: 50}, {0: 10}), s(10, {0: 100}, {0: 60})],
            10.0,
            6.0,
            0,
            id="three-samples",
        ),
        pytest.param(
            [s(0, {0: 100}, {0: 100}), s(10, {0: 20}, {0: 5})],
            None,
            None,
            2,
            id="offsets-went-backwards-gap-unknown",
        ),
        pytest.param(
            [
                s(0, {0: 900}, {0: 900}),
                s(10, {0: 1000}, {0: 1000}),
                s(20, {0: 5}, {0: 0}),
                s(30, {0: 105}, {0: 80}),
            ],
            10.0,
            8.0,
            2,
            id="a-restarted-broker-counts-from-its-return",
        ),
        pytest.param(
            [s(0, {0: 0}, {0: 0}), s(10, {0: 100, 1: 500}, {0: 100})],
            10.0,
            10.0,
            0,
            id="new-partition-not-counted-until-seen-twice",
        ),
        pytest.param([s(5, {0: 0}, {0: 0}), s(5, {0: 9}, {0: 9})], None, None, 0, id="no-time"),
    ],
)
def test_rates(
    samples: list[OffsetSample], arrival: float | None, service: float | None, resets: int
) -> None:
    got = rates(tuple(samples))
    assert (got.arrival_rps, got.service_rps, got.resets) == (arrival, service, resets)


def test_window_drops_old_but_keeps_two() -> None:
    samples = [s(t, {}, {}) for t in (0, 10, 20, 30)]
    assert [x.at_s for x in window(samples, 15)] == [20, 30]
    assert [x.at_s for x in window(samples, 5)] == [20, 30]
    assert [x.at_s for x in window(samples, 100)] == [0, 10, 20, 30]


@pytest.mark.parametrize(
    ("now", "heads", "age"),
    [
        pytest.param(10_000, [9_000, 4_000, None], 6.0, id="max-over-partitions"),
        pytest.param(10_000, [None], None, id="unknown"),
        pytest.param(10_000, [12_000], 0.0, id="clock-skew-is-zero"),
        pytest.param(10_000, [-1], None, id="no-timestamp"),
    ],
)
def test_oldest_age(now: int, heads: list[int | None], age: float | None) -> None:
    assert oldest_age_s(now, heads) == age
