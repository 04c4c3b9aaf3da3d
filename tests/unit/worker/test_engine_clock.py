"""When the engine is predicted to be free."""

from __future__ import annotations

import pytest

from services.worker.engine_clock import EARLY, EngineClock, size_class


class _Clock:
    def __init__(self) -> None:
        self.now = 10.0

    def __call__(self) -> float:
        return self.now


def test_nothing_is_predicted_before_a_batch_ran() -> None:
    clock = EngineClock(clock=_Clock())
    assert clock.handed(32) is None
    assert clock.finished() is None


def test_batches_in_hand_add_up_from_the_running_ones_start() -> None:
    now = _Clock()
    clock = EngineClock(clock=now)
    clock.ran(8, 0.08)  # 10 ms a sample in batches of 8-15
    assert clock.handed(10) == pytest.approx(10 + 0.1 * EARLY)
    now.now = 10.03
    assert clock.handed(10) == pytest.approx(10 + 0.2 * EARLY)  # queued behind it
    now.now = 10.12  # the first ended late; the second starts now
    assert clock.finished() == pytest.approx(10.12 + 0.1 * EARLY)
    assert clock.finished() is None  # the engine is free


@pytest.mark.parametrize(
    ("samples", "expected"), [(1, 1), (2, 2), (3, 2), (4, 3), (7, 3), (8, 4), (32, 6)]
)
def test_size_classes(samples: int, expected: int) -> None:
    assert size_class(samples) == expected


@pytest.mark.parametrize(
    ("runs", "samples", "expected"),
    [
        ([(10, 0.1)], 10, 0.01),
        ([(10, 0.1), (10, 0.2)], 10, 0.012),  # smoothed 0.2 toward the newest
        ([(10, 0.1), (0, 5.0)], 10, 0.01),  # an empty batch says nothing
        # A small batch's fixed cost does not inflate a larger one's prediction ...
        ([(2, 0.02), (16, 0.08)], 16, 0.005),
        # ... and a class that has not run borrows the nearest larger one's (errs early).
        ([(2, 0.02), (16, 0.08), (32, 0.128)], 8, 0.005),
        ([(2, 0.02)], 8, None),  # only smaller classes ran: unknown
    ],
)
def test_per_sample_time(
    runs: list[tuple[int, float]], samples: int, expected: float | None
) -> None:
    clock = EngineClock(smoothing=0.2, clock=_Clock())
    for n, seconds in runs:
        clock.ran(n, seconds)
    assert clock.per_sample_s(samples) == pytest.approx(expected)


def test_length_buckets_are_predicted_apart() -> None:
    clock = EngineClock(clock=_Clock())
    clock.ran(4, 0.04, shape=32)  # 10 ms a sample at 32 tokens
    clock.ran(4, 0.4, shape=256)  # 100 ms a sample at 256
    assert clock.handed(4, shape=32) == pytest.approx(10 + 0.04 * EARLY)
    assert clock.finished() is None
    assert clock.handed(4, shape=256) == pytest.approx(10 + 0.4 * EARLY)
    assert clock.finished() is None
    assert clock.handed(4, shape=64) is None  # no batch of 64 tokens ran yet: nothing held
    assert clock.handed(4, shape=32) is None  # nor behind it
